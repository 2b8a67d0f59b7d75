// Re-adaptation after drift, from a finished run: reads RUN_DIR/config.json
// (the drift environment's config, for the switch steps) and
// RUN_DIR/metrics.jsonl (reward_mean per learner step), and prints for every
// switch the reward level before it, the reward right after it, and the
// steps to recover as sao::env::recovery_after_switches defines them
// (src/env/tasks/drift_env.hpp). Prints numbers only; asserts nothing.
//
//   drift_recovery RUN_DIR [WINDOW=10] [TOLERANCE=0.05]
#include "env/tasks/drift_env.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

double mean(const std::vector<double>& values, int64_t begin, int64_t end) {
  if (end <= begin) return 0.0;
  double sum = 0.0;
  for (int64_t i = begin; i < end; ++i) sum += values[static_cast<size_t>(i)];
  return sum / static_cast<double>(end - begin);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s RUN_DIR [WINDOW=10] [TOLERANCE=0.05]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const int64_t window = argc > 2 ? std::atoll(argv[2]) : 10;
  const double tolerance = argc > 3 ? std::atof(argv[3]) : 0.05;
  try {
    std::ifstream config_file(dir + "/config.json");
    if (!config_file) throw std::runtime_error("cannot open " + dir + "/config.json");
    const auto config = nlohmann::json::parse(config_file);
    const auto task = config.at("task");
    const sao::env::DriftEnvironment drift(sao::env::drift_config_from_json(task, dir + "/config.json: task"));

    std::vector<double> rewards;  // indexed by learner step - 1 (step lines count from 1)
    std::map<int64_t, double> evals;
    std::ifstream metrics(dir + "/metrics.jsonl");
    if (!metrics) throw std::runtime_error("cannot open " + dir + "/metrics.jsonl");
    std::string line;
    while (std::getline(metrics, line)) {
      const auto record = nlohmann::json::parse(line);
      if (record.contains("event")) continue;  // an operator command, not a step
      if (record.contains("eval")) {
        if (record["accuracy"].is_number()) evals[record["step"].get<int64_t>()] = record["accuracy"].get<double>();
        continue;
      }
      const auto step = record["step"].get<int64_t>();
      if (static_cast<int64_t>(rewards.size()) < step) rewards.resize(static_cast<size_t>(step), 0.0);
      rewards[static_cast<size_t>(step - 1)] =
          record["reward_mean"].is_number() ? record["reward_mean"].get<double>() : 0.0;
    }
    const auto n = static_cast<int64_t>(rewards.size());
    // Step line k (1-based) is the learner's k-th update, trained on episodes
    // played while the learner had done k-1 steps, so r[k-1] is the reward
    // under the regime of learner step k-1: the series index is the learner
    // step the episodes saw, as recovery_after_switches expects.
    const auto switches = drift.switch_steps(n);
    const auto recoveries = sao::env::recovery_after_switches(rewards, switches, window, tolerance);
    std::printf("run %s: %lld learner steps, switch_every %lld, window %lld, tolerance %.3f\n", dir.c_str(),
                static_cast<long long>(n), static_cast<long long>(task.value("switch_every", int64_t{50})),
                static_cast<long long>(window), tolerance);
    std::printf("overall reward mean %.3f\n", mean(rewards, 0, n));
    std::printf("%8s %10s %12s %12s %12s %10s\n", "switch", "regime", "pre_level", "first_W", "last_W", "recover");
    for (size_t i = 0; i < recoveries.size(); ++i) {
      const auto s = recoveries[i].switch_step;
      const int64_t next = i + 1 < switches.size() ? switches[i + 1] : n;
      std::printf("%8lld %10s %12.3f %12.3f %12.3f %10lld\n", static_cast<long long>(s),
                  drift.regime_index_at(s) == 0 ? "first" : "other", recoveries[i].pre_level,
                  mean(rewards, s, std::min(s + window, next)), mean(rewards, std::max(s, next - window), next),
                  static_cast<long long>(recoveries[i].steps_to_recover));
    }
    std::printf("held-out accuracy (graded in the regime at that step):");
    for (const auto& item : evals) std::printf(" step %lld: %.3f;", static_cast<long long>(item.first), item.second);
    std::printf("\n");
    // Reward in blocks of `window` steps, to see the dips.
    std::printf("reward by %lld-step block:", static_cast<long long>(window));
    for (int64_t b = 0; b < n; b += window) std::printf(" %.2f", mean(rewards, b, std::min(n, b + window)));
    std::printf("\n");
  } catch (const std::exception& error) {
    std::fprintf(stderr, "drift_recovery: %s\n", error.what());
    return 1;
  }
  return 0;
}
