// `sao plot RUN_DIR [RUN_DIR...]`: learning curves of one or more runs as
// PNGs (reward, held-out accuracy, staleness, DIS rejection, entropy,
// gradient norm, and an overview of them all), so runs can be compared at a glance and pasted into docs.
#include "app/args.hpp"
#include "app/commands.hpp"
#include "base/error.hpp"
#if SAO_WITH_PLOT
#include "plot/plot.hpp"
#endif
#include "report/run_metrics.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <tuple>

namespace sao::cli {

#if SAO_WITH_PLOT
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
      {"accuracy.png", "held-out accuracy", {"heldout_accuracy"}, true, false},
      {"staleness.png", "staleness (mean, policy versions)", {"staleness_mean"}, false, true},
      {"dis_rejection.png",
       "DIS rejected fraction (low + high)",
       {"dis_reject_low_frac", "dis_reject_high_frac"},
       false,
       true},
      {"entropy.png", "policy entropy (moving average)", {"entropy"}, false, true},
      {"grad_norm.png", "policy gradient norm (moving average)", {"grad_norm"}, false, true},
  };
  return list;
}

// One run's curve: x on the chosen axis, y the curve's keys summed (NaN in
// any key leaves a gap), smoothed when the curve asks for it.
std::pair<std::vector<double>, std::vector<double>> curve_of(const report::RunMetrics& run, const Curve& curve,
                                                             const std::string& axis, size_t window) {
  if (curve.evals) return {report::eval_axis(run, axis), report::column(run.evals, curve.keys[0])};
  std::vector<double> y(run.steps.size(), 0.0);
  for (const char* key : curve.keys) {
    const auto values = report::column(run.steps, key);
    for (size_t i = 0; i < values.size(); ++i) y[i] += values[i];
  }
  if (curve.smooth) y = report::moving_average(y, window);
  return {report::step_axis(run, axis), y};
}

// A legend entry: one run, or several (seeds) drawn as mean with a min..max band.
struct RunGroup {
  std::string label;
  std::vector<report::RunMetrics> runs;
};

plot::PlotSeries series_for(const RunGroup& group, const Curve& curve, const std::string& axis, size_t window) {
  plot::PlotSeries series;
  series.label = group.label;
  if (group.runs.size() == 1) {
    std::tie(series.x, series.y) = curve_of(group.runs[0], curve, axis, window);
    return series;
  }
  std::vector<std::vector<double>> xs, ys;
  for (const auto& run : group.runs) {
    auto [x, y] = curve_of(run, curve, axis, window);
    xs.push_back(std::move(x));
    ys.push_back(std::move(y));
  }
  auto summary = report::summarize_runs(xs, ys);
  series.x = std::move(summary.x);
  series.y = std::move(summary.mean);
  series.band_low = std::move(summary.low);
  series.band_high = std::move(summary.high);
  return series;
}

// "DIR" or "LABEL=DIR1,DIR2,..." (the latter: seeds of one variant).
RunGroup read_group(const std::string& argument) {
  RunGroup group;
  const auto equals = argument.find('=');
  std::string dirs = argument;
  if (equals != std::string::npos) {
    group.label = argument.substr(0, equals);
    dirs = argument.substr(equals + 1);
    if (group.label.empty() || dirs.empty()) throw Error("'" + argument + "': expected LABEL=DIR[,DIR...]");
  }
  for (size_t start = 0; start <= dirs.size();) {
    const auto comma = std::min(dirs.find(',', start), dirs.size());
    const auto dir = dirs.substr(start, comma - start);
    if (dir.empty()) throw Error("'" + argument + "': an empty run directory in the list");
    group.runs.push_back(report::read_run_metrics(dir));
    start = comma + 1;
  }
  if (group.label.empty()) group.label = std::filesystem::path(dirs).lexically_normal().filename().string();
  return group;
}

}  // namespace

int run_plot(const Args& args) {
  const std::vector<FlagSpec> specs = {
      {"--out", true, false, "directory for the PNGs (default: FIRST_RUN_DIR/plots)"},
      {"--x", true, false, "x axis: step (default), trajectories, tokens or wall_time_s"},
      {"--smooth", true, false, "moving-average window over steps (default 10; 1 = raw)"},
      {"--label", true, true, "legend label per run, in order (default: the run directory's name)"},
      {"--panels", true, false,
       "comma list of reward, accuracy, staleness, dis_rejection, entropy, grad_norm (default: all)"},
      {"--name", true, false, "file name of the overview PNG (default learning_curves.png)"},
      {"--overview-only", false, false, "write only the overview, not one PNG per panel"},
      {"--help", false, false, "show this help"},
  };
  const auto parsed = parse_args("plot", specs, args);
  if (parsed.has("--help") || parsed.positional.empty()) {
    std::printf(
        "usage: sao plot RUN [RUN...] [options]\n  RUN is a run directory, or LABEL=DIR1,DIR2,... for seeds of one "
        "variant (drawn as their mean with a min-max band)\n%s",
        flags_help(specs).c_str());
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
  std::vector<RunGroup> groups;
  for (size_t i = 0; i < parsed.positional.size(); ++i) {
    groups.push_back(read_group(parsed.positional[i]));
    if (!labels.empty()) groups.back().label = labels[i];
  }
  std::vector<const Curve*> selected;
  const std::string panels_flag = parsed.get("--panels", "");
  for (const auto& curve : curves()) {
    const std::string name = std::filesystem::path(curve.file).stem().string();
    if (panels_flag.empty() || ("," + panels_flag + ",").find("," + name + ",") != std::string::npos) {
      selected.push_back(&curve);
    }
  }
  if (selected.empty())
    throw Error("--panels " + panels_flag +
                ": expected reward, accuracy, staleness, dis_rejection, entropy, grad_norm");
  const std::string first_dir = groups[0].runs[0].dir;
  const std::string out = parsed.get("--out", (std::filesystem::path(first_dir) / "plots").string());

  std::vector<plot::PlotPanel> panels;
  for (const auto* curve : selected) {
    plot::PlotPanel panel{curve->title, axis == "step" ? "learner step" : axis, {}};
    const bool seeds = std::any_of(groups.begin(), groups.end(), [](const RunGroup& g) { return g.runs.size() > 1; });
    if (seeds) panel.title += " - mean over seeds, band min..max";
    for (const auto& group : groups)
      panel.series.push_back(series_for(group, *curve, axis, static_cast<size_t>(window)));
    if (!parsed.has("--overview-only")) {
      const auto path = (std::filesystem::path(out) / curve->file).string();
      plot::write_plot_png(path, {panel}, plot::PlotLayout{1, 720, 420});
      std::printf("wrote %s\n", path.c_str());
    }
    panels.push_back(std::move(panel));
  }
  const auto overview = (std::filesystem::path(out) / parsed.get("--name", "learning_curves.png")).string();
  plot::write_plot_png(overview, panels, plot::PlotLayout{2, 620, 380});
  std::printf("wrote %s\n", overview.c_str());
  return 0;
}

#else
// A sao configured with -DSAO_WITH_PLOT=OFF (no Cairo on the machine, as on
// the lent GPU machine) has every other subcommand.
int run_plot(const Args&) {
  std::fprintf(stderr,
               "sao plot: this sao was built without plots (-DSAO_WITH_PLOT=OFF, no Cairo); "
               "plot the run directory with a sao built with them\n");
  return 2;
}
#endif

}  // namespace sao::cli
