// Progress line and JSONL writer; see progress.hpp.
#include "report/progress.hpp"

#include "base/error.hpp"
#include "base/json_parse.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>

namespace sao::report {

ProgressLine::ProgressLine(std::string label, int64_t total_steps)
    : label_(std::move(label)), total_steps_(total_steps), start_(std::chrono::steady_clock::now()) {}

double ProgressLine::elapsed_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string format_duration(double seconds) {
  const auto total = static_cast<int64_t>(seconds + 0.5);
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%lld:%02lld", static_cast<long long>(total / 60),
                static_cast<long long>(total % 60));
  return buffer;
}

int64_t evaluations_left(int64_t step, int64_t total_steps, int64_t eval_every) {
  if (step > total_steps) return 0;
  int64_t left = 1;  // the final evaluation
  if (eval_every > 0 && total_steps > 1) {
    // Multiples of eval_every in [step, total_steps).
    const int64_t last_multiple = (total_steps - 1) / eval_every;
    const int64_t first_multiple = step <= 0 ? 1 : (step + eval_every - 1) / eval_every;
    if (last_multiple >= first_multiple) left += last_multiple - first_multiple + 1;
  }
  return left;
}

double estimate_eta_seconds(double elapsed_s, double evaluation_s, int64_t evaluations_done, int64_t first_step,
                            int64_t step, int64_t total_steps, int64_t eval_every) {
  const int64_t steps_run = step - first_step;
  if (steps_run <= 0) return 0.0;
  const double step_s = std::max(0.0, elapsed_s - evaluation_s) / static_cast<double>(steps_run);
  const double per_evaluation = evaluations_done > 0 ? evaluation_s / static_cast<double>(evaluations_done) : 0.0;
  return step_s * static_cast<double>(std::max<int64_t>(0, total_steps - step)) +
         per_evaluation * static_cast<double>(evaluations_left(step, total_steps, eval_every));
}

void ProgressLine::count_evaluations(int64_t eval_every, int64_t first_step) {
  counts_evaluations_ = true;
  eval_every_ = eval_every;
  first_step_ = first_step;
}

void ProgressLine::add_evaluation(double seconds) {
  ++evaluations_done_;
  evaluation_s_ += std::max(0.0, seconds);
}

void ProgressLine::print(int64_t step, const std::vector<std::pair<std::string, double>>& values, double rate,
                         const char* rate_unit) {
  const double elapsed = elapsed_seconds();
  const double eta =
      counts_evaluations_
          ? estimate_eta_seconds(elapsed, evaluation_s_, evaluations_done_, first_step_, step, total_steps_, eval_every_)
          : (step > 0 ? elapsed / static_cast<double>(step) * static_cast<double>(total_steps_ - step) : 0.0);
  std::string line = label_ + " " + std::to_string(step) + "/" + std::to_string(total_steps_);
  char buffer[64];
  for (const auto& [name, value] : values) {
    std::snprintf(buffer, sizeof(buffer), " | %s %.4g", name.c_str(), value);
    line += buffer;
  }
  std::snprintf(buffer, sizeof(buffer), " | %.0f %s/s", rate, rate_unit);
  line += buffer;
  line += " | elapsed " + format_duration(elapsed) + " ETA " + format_duration(eta);
  std::fprintf(stderr, "%s\n", line.c_str());
}

JsonlWriter::JsonlWriter(const std::string& path) : path_(path) {
  const std::filesystem::path file(path);
  if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path());
  out_.open(path, std::ios::app);
  if (!out_) throw Error("cannot open metrics file " + path + " for appending");
}

void JsonlWriter::write(const nlohmann::json& line) {
  out_ << base::dump_json(line) << "\n";
  out_.flush();
  if (!out_) throw Error("cannot write metrics file " + path_);
}

}  // namespace sao::report
