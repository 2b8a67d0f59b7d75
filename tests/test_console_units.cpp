// The pieces behind the console, dashboard and `sao plot` that are plain
// functions: Prometheus text, live-knob validation, run-metrics reading and
// series maths, axis ticks, and PNG output.
#include "base/error.hpp"
#include "config/live_knobs.hpp"
#include "plot/plot.hpp"
#include "report/prometheus.hpp"
#include "report/run_metrics.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>

namespace fs = std::filesystem;
using sao::Error;

namespace {
fs::path fresh_dir(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("sao_test_console_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

bool all_nan_or_equal(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]) != std::isnan(got[i])) return false;
    if (!std::isnan(want[i]) && std::fabs(got[i] - want[i]) > 1e-12) return false;
  }
  return true;
}
}  // namespace

TEST_CASE("prometheus names, label values and numbers") {
  using namespace sao::report;
  CHECK(prometheus_metric_name("reward_mean") == "reward_mean");
  CHECK(prometheus_metric_name("version.rollout-0") == "version_rollout_0");
  CHECK(prometheus_metric_name("2xx") == "_2xx");
  CHECK(prometheus_metric_name("") == "_");
  CHECK(prometheus_label_value("a\"b\\c\nd") == "a\\\"b\\\\c\\nd");
  CHECK(prometheus_number(3) == "3");
  CHECK(prometheus_number(0.25) == "0.25");
  CHECK(prometheus_number(std::nan("")) == "NaN");
  CHECK(prometheus_number(std::numeric_limits<double>::infinity()) == "+Inf");
  CHECK(prometheus_number(-std::numeric_limits<double>::infinity()) == "-Inf");
}

TEST_CASE("prometheus writer: HELP and TYPE once per family, one sample per line") {
  sao::report::PrometheusWriter out;
  out.family("sao_step", "gauge", "learner step");
  out.sample({}, 12);
  out.family("sao_actor_messages_handled_total", "counter", "messages\nhandled");
  out.sample({{"actor", "rollout-0"}, {"kind", "rollout"}}, 7);
  out.sample({{"actor", "we\"ird"}}, 1.5);
  CHECK(out.text() ==
        "# HELP sao_step learner step\n"
        "# TYPE sao_step gauge\n"
        "sao_step 12\n"
        "# HELP sao_actor_messages_handled_total messages handled\n"
        "# TYPE sao_actor_messages_handled_total counter\n"
        "sao_actor_messages_handled_total{actor=\"rollout-0\",kind=\"rollout\"} 7\n"
        "sao_actor_messages_handled_total{actor=\"we\\\"ird\"} 1.5\n");
  sao::report::PrometheusWriter empty;
  CHECK_THROWS_WITH_AS(empty.sample({}, 1), "prometheus: a sample before any family", Error);
  CHECK_THROWS_WITH_AS(empty.family("x", "histogram", ""), "prometheus: unknown metric type 'histogram'", Error);
}

TEST_CASE("live knobs: what is accepted and what is refused, by name") {
  using sao::config::Knob;
  using sao::config::KnobOwner;
  using sao::config::parse_knob_change;
  auto lr = parse_knob_change("actor_lr", "2e-5");
  CHECK(lr.value == 2e-5);
  CHECK(lr.knob == Knob::kActorLr);
  CHECK(sao::config::spec_of(lr.knob).owner == KnobOwner::kLearner);
  auto staleness = parse_knob_change("max_staleness", "-1");
  CHECK(staleness.knob == Knob::kMaxStaleness);
  CHECK(staleness.value == -1);
  // Staleness admission is the replay's alone.
  CHECK(sao::config::spec_of(staleness.knob).owner == KnobOwner::kReplay);
  // One table: every knob once, its name and number both ways.
  for (const auto& spec : sao::config::knob_table()) {
    CHECK(sao::config::knob_named(spec.name) == spec.knob);
    CHECK(sao::config::knob_from_value(static_cast<uint8_t>(spec.knob)) == spec.knob);
  }
  CHECK_FALSE(sao::config::knob_from_value(5).has_value());
  CHECK_FALSE(sao::config::knob_named("temperature").has_value());
  CHECK(parse_knob_change("min_batch", "8").value == 8);
  CHECK_THROWS_WITH_AS(parse_knob_change("temperature", "1"),
                       "set temperature: not a live knob (live knobs: max_staleness, min_batch, max_batch, actor_lr, "
                       "critic_lr)",
                       Error);
  CHECK_THROWS_WITH_AS(parse_knob_change("min_batch", "four"), "set min_batch: 'four' is not a finite number", Error);
  CHECK_THROWS_WITH_AS(parse_knob_change("min_batch", "2.5"),
                       "set min_batch: must be an integer in [1, 1048576], got 2.5", Error);
  CHECK_THROWS_WITH_AS(parse_knob_change("min_batch", "0"), "set min_batch: must be an integer in [1, 1048576], got 0",
                       Error);
  CHECK_THROWS_WITH_AS(parse_knob_change("max_staleness", "-2"),
                       "set max_staleness: must be an integer in [-1, 100000000], got -2", Error);
  CHECK_THROWS_WITH_AS(parse_knob_change("actor_lr", "0"), "set actor_lr: must be in (0, 1], got 0", Error);
  CHECK_THROWS_WITH_AS(parse_knob_change("critic_lr", "nan"), "set critic_lr: 'nan' is not a finite number", Error);
}

TEST_CASE("live knobs: a replay change that breaks the replay config leaves it unchanged") {
  sao::replay::ReplayConfig config;
  config.min_batch = 1;
  config.max_batch = 64;
  sao::config::apply_knob(config, sao::config::parse_knob_change("min_batch", "8"));
  CHECK(config.min_batch == 8);
  CHECK_THROWS_WITH_AS(sao::config::apply_knob(config, sao::config::parse_knob_change("max_batch", "4")),
                       "set max_batch: replay.max_batch: must be >= min_batch", Error);
  CHECK(config.max_batch == 64);
  config.group_size = 8;
  config.min_batch = 8;
  CHECK_THROWS_WITH_AS(sao::config::apply_knob(config, sao::config::parse_knob_change("min_batch", "12")),
                       "set min_batch: replay: min_batch and max_batch must be multiples of group_size (8)", Error);
  CHECK(config.min_batch == 8);
  CHECK(sao::config::replay_knob_value(config, sao::config::Knob::kMinBatch) == 8);
  CHECK(sao::config::replay_knob_value(config, sao::config::Knob::kMaxStaleness) == config.max_staleness);
  CHECK_THROWS_WITH_AS(sao::config::apply_knob(config, sao::config::parse_knob_change("actor_lr", "1e-4")),
                       "set actor_lr: not a replay knob", Error);
}

TEST_CASE("series maths: moving average, cumulative sum") {
  const double nan = std::nan("");
  CHECK(all_nan_or_equal(sao::report::moving_average({1, 2, 3, 4}, 2), {1, 1.5, 2.5, 3.5}));
  CHECK(all_nan_or_equal(sao::report::moving_average({1, nan, 3, 5}, 2), {1, nan, 2, 4}));
  CHECK(all_nan_or_equal(sao::report::moving_average({4, 8}, 1), {4, 8}));
  CHECK_THROWS_WITH_AS(sao::report::moving_average({1}, 0), "moving_average: window must be >= 1", Error);
  CHECK(all_nan_or_equal(sao::report::cumulative_sum({64, nan, 32}), {64, 64, 96}));
}

TEST_CASE("run metrics: lines sorted into steps, evals and events; axes") {
  const auto dir = fresh_dir("metrics");
  std::ofstream(dir / "metrics.jsonl") << "{\"eval\":true,\"step\":0,\"accuracy\":0.1,\"wall_time_s\":0.5}\n"
                                       << "{\"step\":1,\"trajectories\":16,\"tokens\":100,\"reward_mean\":0.5,"
                                          "\"accuracy\":0.25}\n"
                                       << "{\"event\":\"set\",\"key\":\"min_batch\",\"value\":\"4\",\"step\":1}\n"
                                       << "{\"step\":2,\"trajectories\":4,\"tokens\":40,\"reward_mean\":null}\n"
                                       << "{\"eval\":true,\"step\":2,\"heldout_accuracy\":0.3,\"wall_time_s\":2.0}\n";
  const auto run = sao::report::read_run_metrics(dir.string());
  REQUIRE(run.steps.size() == 2);
  REQUIRE(run.evals.size() == 2);
  REQUIRE(run.events.size() == 1);
  CHECK(all_nan_or_equal(sao::report::column(run.steps, "reward_mean"), {0.5, std::nan("")}));
  CHECK(all_nan_or_equal(sao::report::step_axis(run, "trajectories"), {16, 20}));
  CHECK(all_nan_or_equal(sao::report::step_axis(run, "tokens"), {100, 140}));
  CHECK(all_nan_or_equal(sao::report::eval_axis(run, "trajectories"), {0, 20}));
  CHECK(all_nan_or_equal(sao::report::eval_axis(run, "step"), {0, 2}));
  CHECK(all_nan_or_equal(sao::report::eval_axis(run, "wall_time_s"), {0.5, 2.0}));
  // The old name of each accuracy is read as the new one.
  CHECK(all_nan_or_equal(sao::report::column(run.evals, "heldout_accuracy"), {0.1, 0.3}));
  CHECK(all_nan_or_equal(sao::report::column(run.steps, "batch_accuracy"), {0.25, std::nan("")}));
  CHECK_FALSE(run.evals[0].contains("accuracy"));
  CHECK_THROWS_WITH_AS(sao::report::step_axis(run, "epochs"),
                       "x axis 'epochs': expected step, wall_time_s, trajectories or tokens", Error);
}

TEST_CASE("run metrics: a bad line is named by file and line number") {
  const auto dir = fresh_dir("bad_metrics");
  const auto file = (dir / "metrics.jsonl").string();
  std::ofstream(file) << "{\"step\":1}\n{\"step\":\n";
  CHECK_THROWS_WITH_AS(sao::report::read_run_metrics(dir.string()), (file + ":2: not a JSON object").c_str(), Error);
  std::ofstream(file) << "{\"reward\":1}\n";
  CHECK_THROWS_WITH_AS(sao::report::read_run_metrics(dir.string()), (file + ":1: no numeric \"step\"").c_str(), Error);
  fs::remove(file);
  CHECK_THROWS_WITH_AS(sao::report::read_run_metrics(dir.string()),
                       (file + ": not found (is " + dir.string() + " a run directory?)").c_str(), Error);
}

TEST_CASE("series of several seeds: mean and min/max band, aligned to the shortest run") {
  const double nan = std::nan("");
  const auto summary = sao::report::summarize_runs({{0, 10, 20}, {0, 12}}, {{0.1, 0.5, 0.9}, {0.3, nan}});
  CHECK(all_nan_or_equal(summary.x, {0, 11}));
  CHECK(all_nan_or_equal(summary.mean, {0.2, 0.5}));
  CHECK(all_nan_or_equal(summary.low, {0.1, 0.5}));
  CHECK(all_nan_or_equal(summary.high, {0.3, 0.5}));
  CHECK_THROWS_WITH_AS(sao::report::summarize_runs({}, {}), "summarize_runs: no runs", Error);
  CHECK_THROWS_WITH_AS(sao::report::summarize_runs({{1}}, {}), "summarize_runs: x and y series of different run counts",
                       Error);
}

TEST_CASE("nice ticks") {
  using sao::plot::nice_ticks;
  CHECK(nice_ticks(0, 1, 5) == std::vector<double>{0, 0.2, 0.4, 0.6000000000000001, 0.8, 1});
  CHECK(nice_ticks(0, 300, 6) == std::vector<double>{0, 50, 100, 150, 200, 250, 300});
  CHECK(nice_ticks(3, 3, 5) == std::vector<double>{3});
  CHECK(nice_ticks(-1, 1, 4) == std::vector<double>{-1, -0.5, 0, 0.5, 1});
  CHECK_THROWS_AS(nice_ticks(0, std::nan(""), 5), Error);
}

TEST_CASE("plots are PNG files of the laid-out size; mismatched series are refused") {
  const auto dir = fresh_dir("plot");
  sao::plot::PlotPanel panel{
      "reward", "learner step", {{"run-a", {0, 1, 2}, {0.1, std::nan(""), 0.4}, {0.0, 0.1, 0.3}, {0.2, 0.3, 0.5}}}};
  const auto path = (dir / "sub" / "curves.png").string();
  sao::plot::write_plot_png(path, {panel, panel, panel}, sao::plot::PlotLayout{2, 300, 200});
  std::ifstream png(path, std::ios::binary);
  unsigned char header[24] = {};
  png.read(reinterpret_cast<char*>(header), sizeof(header));
  REQUIRE(png.good());
  CHECK(header[1] == 'P');
  CHECK(header[2] == 'N');
  CHECK(header[3] == 'G');
  const auto be32 = [&](int at) {
    return (uint32_t{header[at]} << 24) | (uint32_t{header[at + 1]} << 16) | (uint32_t{header[at + 2]} << 8) |
           uint32_t{header[at + 3]};
  };
  CHECK(be32(16) == 600);  // 2 columns x 300
  CHECK(be32(20) == 400);  // 2 rows x 200
  sao::plot::PlotPanel bad{"bad", "step", {{"run-b", {0, 1}, {0.5}, {}, {}}}};
  CHECK_THROWS_WITH_AS(sao::plot::write_plot_png(path, {bad}, {}),
                       ("plot " + path + ": panel 'bad' series 'run-b' has 2 x values and 1 y values").c_str(), Error);
  sao::plot::PlotPanel bad_band{"bad", "step", {{"run-c", {0, 1}, {0.5, 0.6}, {0.4}, {0.7, 0.8}}}};
  CHECK_THROWS_WITH_AS(
      sao::plot::write_plot_png(path, {bad_band}, {}),
      ("plot " + path + ": panel 'bad' series 'run-c' has a band whose length differs from its 2 x values").c_str(),
      Error);
}
