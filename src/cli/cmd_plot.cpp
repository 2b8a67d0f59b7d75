// `sao plot RUN_DIR [RUN_DIR...]`: learning curves of one or more runs as
// PNGs (reward, held-out accuracy, staleness, DIS rejection, and an overview
// of all four), so runs can be compared at a glance and pasted into docs.
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "runtime/error.hpp"
#include "runtime/plot.hpp"
#include "runtime/run_metrics.hpp"

#include <cstdio>
#include <filesystem>

namespace sao::cli {

namespace {

struct Curve {
  const char* file;   // PNG name
  const char* title;  // panel title
  std::vector<const char*> keys;
  bool evals = false;
  bool smooth = true;
};

const std::vector<Curve>& curves() {
  static const std::vector<Curve> list = {
      {"reward.png", "reward (moving average)", {"reward_mean"}, false, true},
      {"accuracy.png", "held-out accuracy", {"accuracy"}, true, false},
      {"staleness.png", "staleness (mean, policy versions)", {"staleness_mean"}, false, true},
      {"dis_rejection.png",
       "DIS rejected fraction (low + high)",
       {"dis_reject_low_frac", "dis_reject_high_frac"},
       false,
       true},
  };
  return list;
}

runtime::PlotSeries series_for(const runtime::RunMetrics& run, const Curve& curve, const std::string& label,
                               const std::string& axis, size_t window) {
  runtime::PlotSeries series;
  series.label = label;
  if (curve.evals) {
    series.x = runtime::eval_axis(run, axis);
    series.y = runtime::column(run.evals, curve.keys[0]);
    return series;
  }
  series.x = runtime::step_axis(run, axis);
  series.y.assign(run.steps.size(), 0.0);
  for (const char* key : curve.keys) {
    const auto values = runtime::column(run.steps, key);
    for (size_t i = 0; i < values.size(); ++i) series.y[i] += values[i];  // NaN stays NaN: a gap
  }
  if (curve.smooth) series.y = runtime::moving_average(series.y, window);
  return series;
}

}  // namespace

int run_plot(const Args& args) {
  const std::vector<FlagSpec> specs = {
      {"--out", true, false, "directory for the PNGs (default: FIRST_RUN_DIR/plots)"},
      {"--x", true, false, "x axis: step (default), trajectories, tokens or wall_time_s"},
      {"--smooth", true, false, "moving-average window over steps (default 10; 1 = raw)"},
      {"--label", true, true, "legend label per run, in order (default: the run directory's name)"},
      {"--help", false, false, "show this help"},
  };
  const auto parsed = parse_args("plot", specs, args);
  if (parsed.has("--help") || parsed.positional.empty()) {
    std::printf("usage: sao plot RUN_DIR [RUN_DIR...] [options]\n%s", flags_help(specs).c_str());
    return parsed.has("--help") ? 0 : 2;
  }
  const auto labels = parsed.all("--label");
  if (!labels.empty() && labels.size() != parsed.positional.size()) {
    throw Error("--label given " + std::to_string(labels.size()) + " times for " +
                std::to_string(parsed.positional.size()) + " runs");
  }
  const std::string axis = parsed.get("--x", "step");
  const int64_t window = parsed.get_int("--smooth", 10);
  if (window < 1) throw Error("--smooth: must be >= 1");
  std::vector<runtime::RunMetrics> runs;
  for (const auto& dir : parsed.positional) runs.push_back(runtime::read_run_metrics(dir));
  const std::string out = parsed.get("--out", (std::filesystem::path(parsed.positional[0]) / "plots").string());

  std::vector<runtime::PlotPanel> panels;
  for (const auto& curve : curves()) {
    runtime::PlotPanel panel{curve.title, axis == "step" ? "learner step" : axis, {}};
    for (size_t r = 0; r < runs.size(); ++r) {
      const auto label =
          labels.empty() ? std::filesystem::path(runs[r].dir).lexically_normal().filename().string() : labels[r];
      panel.series.push_back(series_for(runs[r], curve, label, axis, static_cast<size_t>(window)));
    }
    const auto path = (std::filesystem::path(out) / curve.file).string();
    runtime::write_plot_png(path, {panel}, runtime::PlotLayout{1, 720, 420});
    std::printf("wrote %s\n", path.c_str());
    panels.push_back(std::move(panel));
  }
  const auto overview = (std::filesystem::path(out) / "learning_curves.png").string();
  runtime::write_plot_png(overview, panels, runtime::PlotLayout{2, 620, 380});
  std::printf("wrote %s\n", overview.c_str());
  return 0;
}

}  // namespace sao::cli
