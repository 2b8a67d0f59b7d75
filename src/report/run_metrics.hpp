// Reading a finished (or running) run's RUN_DIR/metrics.jsonl back: step
// lines, evaluation lines and operator events, plus the series arithmetic
// plots and reports need (moving average, cumulative sums, x-axis choice).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace sao::report {

struct RunMetrics {
  std::string dir;
  std::vector<nlohmann::json> steps;   // learner step lines, in file order
  std::vector<nlohmann::json> evals;   // lines with "eval": true
  std::vector<nlohmann::json> events;  // operator commands ("event")
};

// Runs written before the keys were named apart call held-out accuracy
// "accuracy" on evaluation lines (and the training batch's "accuracy" on
// step lines): moves an evaluation line's old key to "heldout_accuracy" and
// a step line's to "batch_accuracy", so readers of old and new runs see one
// name. Lines that already use the new keys are left as they are.
void upgrade_legacy_accuracy(nlohmann::json& line);

// Throws sao::Error naming the file and line for a missing file or a line
// that is not a JSON object with a numeric "step".
RunMetrics read_run_metrics(const std::string& run_dir);

// The number at `key` in each line (NaN where missing or null).
std::vector<double> column(const std::vector<nlohmann::json>& lines, const std::string& key);

// Trailing moving average over the last `window` finite values (window 1:
// a copy); NaN entries stay NaN and are skipped by later windows.
std::vector<double> moving_average(const std::vector<double>& values, size_t window);

// Running sum; NaN entries count as 0.
std::vector<double> cumulative_sum(const std::vector<double>& values);

// The x value of every step line for an axis: "step", "wall_time_s",
// "trajectories" (cumulative) or "tokens" (cumulative). Throws sao::Error
// for another name.
std::vector<double> step_axis(const RunMetrics& run, const std::string& axis);
// The same axis at each evaluation (evaluations are matched to the last
// step line at or before their step; step 0 maps to 0).
std::vector<double> eval_axis(const RunMetrics& run, const std::string& axis);

// Several runs of one variant (seeds) as one curve: runs are aligned by
// index up to the shortest; x is the mean x, `mean` the mean of the finite
// y values, `low`/`high` their min/max (NaN where no run has a value).
// Throws sao::Error when there are no runs or xs and ys differ in count.
struct SeriesSummary {
  std::vector<double> x, mean, low, high;
};
SeriesSummary summarize_runs(const std::vector<std::vector<double>>& xs, const std::vector<std::vector<double>>& ys);

}  // namespace sao::report
