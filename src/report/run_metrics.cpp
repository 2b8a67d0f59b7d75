// Reading metrics.jsonl; see run_metrics.hpp.
#include "report/run_metrics.hpp"

#include "base/error.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <filesystem>
#include <fstream>
#include <limits>

namespace sao::report {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}

void upgrade_legacy_accuracy(nlohmann::json& line) {
  if (!line.is_object() || line.contains("event")) return;
  const auto old = line.find("accuracy");
  if (old == line.end()) return;
  const char* key = line.contains("eval") ? "heldout_accuracy" : "batch_accuracy";
  if (!line.contains(key)) line[key] = *old;
  line.erase("accuracy");
}

RunMetrics read_run_metrics(const std::string& run_dir) {
  const auto path = (std::filesystem::path(run_dir) / "metrics.jsonl").string();
  std::ifstream in(path);
  if (!in) throw Error(path + ": not found (is " + run_dir + " a run directory?)");
  RunMetrics run;
  run.dir = run_dir;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const std::string where = path + ":" + std::to_string(number);
    if (record.is_discarded() || !record.is_object()) throw Error(where + ": not a JSON object");
    if (!record.contains("step") || !record["step"].is_number()) throw Error(where + ": no numeric \"step\"");
    upgrade_legacy_accuracy(record);
    if (record.contains("event")) {
      run.events.push_back(std::move(record));
    } else if (record.contains("eval")) {
      run.evals.push_back(std::move(record));
    } else {
      run.steps.push_back(std::move(record));
    }
  }
  return run;
}

std::vector<double> column(const std::vector<nlohmann::json>& lines, const std::string& key) {
  std::vector<double> values;
  values.reserve(lines.size());
  for (const auto& line : lines) {
    auto it = line.find(key);
    values.push_back(it != line.end() && it->is_number() ? it->get<double>() : kNaN);
  }
  return values;
}

std::vector<double> moving_average(const std::vector<double>& values, size_t window) {
  if (window == 0) throw Error("moving_average: window must be >= 1");
  std::vector<double> averaged(values.size(), kNaN);
  std::deque<double> recent;
  double sum = 0.0;
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) continue;
    recent.push_back(values[i]);
    sum += values[i];
    if (recent.size() > window) {
      sum -= recent.front();
      recent.pop_front();
    }
    averaged[i] = sum / static_cast<double>(recent.size());
  }
  return averaged;
}

std::vector<double> cumulative_sum(const std::vector<double>& values) {
  std::vector<double> sums;
  sums.reserve(values.size());
  double total = 0.0;
  for (double value : values) {
    if (std::isfinite(value)) total += value;
    sums.push_back(total);
  }
  return sums;
}

std::vector<double> step_axis(const RunMetrics& run, const std::string& axis) {
  if (axis == "step" || axis == "wall_time_s") return column(run.steps, axis);
  if (axis == "trajectories" || axis == "tokens") return cumulative_sum(column(run.steps, axis));
  throw Error("x axis '" + axis + "': expected step, wall_time_s, trajectories or tokens");
}

std::vector<double> eval_axis(const RunMetrics& run, const std::string& axis) {
  if (axis == "wall_time_s") return column(run.evals, "wall_time_s");
  const auto xs = step_axis(run, axis);
  const auto steps = column(run.steps, "step");
  std::vector<double> result;
  for (const auto& eval : run.evals) {
    const double step = eval["step"].get<double>();
    double x = 0.0;
    for (size_t i = 0; i < steps.size() && steps[i] <= step; ++i) x = xs[i];
    result.push_back(axis == "step" ? step : x);
  }
  return result;
}

SeriesSummary summarize_runs(const std::vector<std::vector<double>>& xs, const std::vector<std::vector<double>>& ys) {
  if (xs.empty()) throw Error("summarize_runs: no runs");
  if (xs.size() != ys.size()) throw Error("summarize_runs: x and y series of different run counts");
  size_t length = std::numeric_limits<size_t>::max();
  for (size_t r = 0; r < xs.size(); ++r) length = std::min({length, xs[r].size(), ys[r].size()});
  SeriesSummary summary;
  for (size_t i = 0; i < length; ++i) {
    double x_sum = 0.0, y_sum = 0.0;
    double low = kNaN, high = kNaN;
    size_t finite = 0;
    for (size_t r = 0; r < xs.size(); ++r) {
      x_sum += xs[r][i];
      const double y = ys[r][i];
      if (!std::isfinite(y)) continue;
      y_sum += y;
      low = finite == 0 ? y : std::min(low, y);
      high = finite == 0 ? y : std::max(high, y);
      ++finite;
    }
    summary.x.push_back(x_sum / static_cast<double>(xs.size()));
    summary.mean.push_back(finite == 0 ? kNaN : y_sum / static_cast<double>(finite));
    summary.low.push_back(low);
    summary.high.push_back(high);
  }
  return summary;
}

}  // namespace sao::report
