// A one-line progress report for long work (step, named numbers, rate, ETA),
// and a JSONL metrics writer that flushes every line so a crash loses none.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace sao::report {

// Held-out evaluations still to run when the progress line reports `step`
// of a run of `total_steps` that evaluates every `eval_every` steps (0:
// never between) and once at the end: the evaluation of `step` itself runs
// after its step line, so at the last step one is left.
int64_t evaluations_left(int64_t step, int64_t total_steps, int64_t eval_every);

// Seconds left: the steps' own pace (elapsed time less the evaluations'
// time, over the steps this process ran) for the steps left, plus the mean
// measured evaluation for each evaluation left. 0 before the first step.
double estimate_eta_seconds(double elapsed_s, double evaluation_s, int64_t evaluations_done, int64_t first_step,
                            int64_t step, int64_t total_steps, int64_t eval_every);

class ProgressLine {
 public:
  ProgressLine(std::string label, int64_t total_steps);
  // Prints "label step/total | name value ... | rate unit/s | ETA".
  void print(int64_t step, const std::vector<std::pair<std::string, double>>& values, double rate,
             const char* rate_unit);
  double elapsed_seconds() const;
  // Makes the ETA count held-out evaluations (estimate_eta_seconds): the run
  // evaluates every `eval_every` steps and at its end; this process started
  // at `first_step` (a resumed run's checkpoint step).
  void count_evaluations(int64_t eval_every, int64_t first_step);
  // One evaluation finished, after `seconds`.
  void add_evaluation(double seconds);

 private:
  std::string label_;
  int64_t total_steps_;
  std::chrono::steady_clock::time_point start_;
  bool counts_evaluations_ = false;
  int64_t eval_every_ = 0;
  int64_t first_step_ = 0;
  int64_t evaluations_done_ = 0;
  double evaluation_s_ = 0.0;
};

class JsonlWriter {
 public:
  // Appends to `path` (creating parent directories).
  explicit JsonlWriter(const std::string& path);
  void write(const nlohmann::json& line);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

std::string format_duration(double seconds);

}  // namespace sao::report
