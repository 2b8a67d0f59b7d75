// Metrics sink behaviour; see metrics_actor.hpp.
#include "actors/metrics_actor.hpp"

#include "runtime/progress.hpp"
#include "runtime/stats.hpp"

#include <cmath>
#include <filesystem>
#include <memory>

namespace sao::actors {

struct MetricsActorState {
  MetricsActorConfig config;
  std::unique_ptr<runtime::JsonlWriter> writer;
  std::unique_ptr<runtime::ProgressLine> progress;
  std::vector<double> latencies_ms;
  std::vector<double> idle_ms;
  std::vector<nlohmann::json> evals;
  int64_t episodes_lost = 0;
  int64_t env_restarts = 0;
  int64_t rollout_restarts = 0;
  int64_t dropped_stale = 0;
  int64_t last_step = 0;
  double last_accuracy = std::nan("");
  double reward_ema = std::nan("");
  static inline const char* name = "metrics";
};

namespace {
using Self = caf::stateful_actor<MetricsActorState>*;

nlohmann::json summary_of(const MetricsActorState& state) {
  nlohmann::json summary = {
      {"steps", state.last_step},
      {"episodes_lost", state.episodes_lost},
      {"env_restarts", state.env_restarts},
      {"rollout_restarts", state.rollout_restarts},
      {"dropped_stale", state.dropped_stale},
      {"rollout_to_learner_ms_p50", runtime::percentile(state.latencies_ms, 50)},
      {"rollout_to_learner_ms_p99", runtime::percentile(state.latencies_ms, 99)},
      {"learner_idle_ms_p50", runtime::percentile(state.idle_ms, 50)},
      {"learner_idle_ms_p99", runtime::percentile(state.idle_ms, 99)},
      {"evals", state.evals},
  };
  if (!state.evals.empty()) {
    summary["accuracy_first"] = state.evals.front()["accuracy"];
    summary["accuracy_last"] = state.evals.back()["accuracy"];
  }
  return summary;
}

void on_step(Self self, const msg::StepReport& report) {
  auto& state = self->state;
  nlohmann::json line(report.metrics);
  line["step"] = report.step;
  line["policy_version"] = report.policy_version;
  line["episodes_lost"] = state.episodes_lost;
  // JSON has no NaN; an undefined number is written as null.
  for (auto& item : line.items()) {
    if (item.value().is_number_float() && !std::isfinite(item.value().get<double>())) item.value() = nullptr;
  }
  state.writer->write(line);
  state.latencies_ms.insert(state.latencies_ms.end(), report.rollout_to_learner_ms.begin(),
                            report.rollout_to_learner_ms.end());
  auto get = [&](const char* key) {
    auto it = report.metrics.find(key);
    return it == report.metrics.end() ? std::nan("") : it->second;
  };
  state.idle_ms.push_back(get("learner_idle_ms"));
  state.dropped_stale += static_cast<int64_t>(get("dropped_stale"));
  state.last_step = report.step;
  const double reward = get("reward_mean");
  if (std::isfinite(reward))
    state.reward_ema = std::isnan(state.reward_ema) ? reward : 0.9 * state.reward_ema + 0.1 * reward;
  const int64_t every = std::max<int64_t>(1, state.config.total_steps / 50);
  if (report.step % every == 0 || report.step == state.config.total_steps) {
    state.progress->print(report.step,
                          {{"reward", state.reward_ema},
                           {"accuracy", state.last_accuracy},
                           {"staleness", get("staleness_mean")},
                           {"dis_rej", get("dis_reject_low_frac") + get("dis_reject_high_frac")},
                           {"lost", static_cast<double>(state.episodes_lost)}},
                          get("tokens_per_s"), "tok");
  }
}
}  // namespace

caf::behavior metrics_actor(caf::stateful_actor<MetricsActorState>* self, MetricsActorConfig config) {
  auto& state = self->state;
  state.config = std::move(config);
  state.writer =
      std::make_unique<runtime::JsonlWriter>((std::filesystem::path(state.config.run_dir) / "metrics.jsonl").string());
  state.progress = std::make_unique<runtime::ProgressLine>("train", state.config.total_steps);
  return {
      [self](const msg::StepReport& report) { on_step(self, report); },
      [self](const msg::EvalReport& report) {
        auto& st = self->state;
        st.last_accuracy = report.accuracy;
        nlohmann::json line = {{"eval", true},
                               {"step", report.step},
                               {"policy_version", report.policy_version},
                               {"accuracy", report.accuracy},
                               {"total", report.total},
                               {"split", report.split},
                               {"wall_time_s", st.progress->elapsed_seconds()}};
        if (!std::isfinite(report.accuracy)) line["accuracy"] = nullptr;
        st.writer->write(line);
        st.evals.push_back(line);
        std::fprintf(stderr, "eval step %lld: held-out accuracy %.4f (%lld problems)\n",
                     static_cast<long long>(report.step), report.accuracy, static_cast<long long>(report.total));
      },
      [self](const msg::EpisodeLost&) { ++self->state.episodes_lost; },
      [self](atoms::register_atom, const std::string& what) {
        if (what == "env_restart") ++self->state.env_restarts;
        if (what == "rollout_restart") ++self->state.rollout_restarts;
      },
      [self](atoms::stop_atom) {
        const auto summary = summary_of(self->state);
        std::ofstream out(std::filesystem::path(self->state.config.run_dir) / "summary.json");
        out << summary.dump(2) << "\n";
        return summary.dump();
      },
      [self](atoms::status_atom) {
        const auto& st = self->state;
        return msg::ActorStatus{"metrics",
                                "metrics",
                                "idle",
                                {{"last_step", static_cast<double>(st.last_step)},
                                 {"episodes_lost", static_cast<double>(st.episodes_lost)},
                                 {"accuracy", st.last_accuracy},
                                 {"reward_ema", st.reward_ema}}};
      },
  };
}

caf::actor spawn_metrics_actor(caf::actor_system& system, MetricsActorConfig config) {
  return system.spawn(metrics_actor, std::move(config));
}

}  // namespace sao::actors
