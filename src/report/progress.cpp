// Progress line and JSONL writer; see progress.hpp.
#include "report/progress.hpp"

#include "base/error.hpp"
#include "base/json_parse.hpp"

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

void ProgressLine::print(int64_t step, const std::vector<std::pair<std::string, double>>& values, double rate,
                         const char* rate_unit) {
  const double elapsed = elapsed_seconds();
  const double eta = step > 0 ? elapsed / static_cast<double>(step) * static_cast<double>(total_steps_ - step) : 0.0;
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
