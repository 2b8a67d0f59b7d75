// Metrics sink behaviour; see metrics_actor.hpp.
#include "actors/run/metrics_actor.hpp"

#include "actors/introspection.hpp"
#include "base/json_parse.hpp"
#include "base/stats.hpp"
#include "report/metrics_rewind.hpp"
#include "report/progress.hpp"
#include "report/run_summary.hpp"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>

namespace sao::actors {

struct MetricsActorState {
  MetricsActorConfig config;
  std::unique_ptr<report::JsonlWriter> writer;
  std::unique_ptr<report::ProgressLine> progress;
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
  std::deque<nlohmann::json> history;   // recent step lines, for the console and dashboard
  std::vector<nlohmann::json> events;   // operator commands
  nlohmann::json resume_event;          // what a resume counted as lost; null when not resuming
  std::map<std::string, double> knobs;  // live values not owned by the learner's own metrics
  report::LogprobAgreement logprob_agreement;
  ActorCounters counters;
  static inline const char* name = "metrics";
};

namespace {
using MetricsSelf = MetricsActor::stateful_pointer<MetricsActorState>;

// The actors' own time accounting (introspection numbers) summarised, or
// null when no actor reported any (e.g. every status request timed out).
nlohmann::json time_accounting_of(const std::vector<msg::ActorStatus>& statuses) {
  std::vector<report::ActorTimeSample> samples;
  for (const auto& status : statuses) {
    if (!(status.time.alive_s > 0)) continue;  // an actor that did not describe itself
    samples.push_back({status.name, status.kind, status.node, status.time});
  }
  if (samples.empty()) return nullptr;
  auto accounting = report::summarise_time(samples);
  // This process only: remote nodes' threads are theirs to report.
  accounting["threads_cpu_s"] = report::thread_cpu_by_name();
  return accounting;
}

// How the weights travelled (weight-sync's final numbers: pushes and bytes
// by route, checked versions), or null when it did not answer.
nlohmann::json weight_sync_of(const std::vector<msg::ActorStatus>& statuses) {
  for (const auto& status : statuses) {
    if (status.kind != "weight_sync") continue;
    nlohmann::json numbers = nlohmann::json::object();
    for (const auto& [name, value] : status.numbers) {
      const bool by_route = name.rfind("pushes", 0) == 0 || name.rfind("bytes_", 0) == 0;
      if (by_route || name == "checksums_verified" || name == "checksum_mismatches" || name == "route_refusals") {
        numbers[name] = value;
      }
    }
    return numbers;
  }
  return nullptr;
}

nlohmann::json summary_of(const MetricsActorState& state) {
  nlohmann::json summary = {
      {"steps", state.last_step},
      {"episodes_lost", state.episodes_lost},
      {"env_restarts", state.env_restarts},
      {"rollout_restarts", state.rollout_restarts},
      {"dropped_stale", state.dropped_stale},
      {"rollout_to_learner_ms_p50", base::percentile(state.latencies_ms, 50)},
      {"rollout_to_learner_ms_p99", base::percentile(state.latencies_ms, 99)},
      {"learner_idle_ms_p50", base::percentile(state.idle_ms, 50)},
      {"learner_idle_ms_p99", base::percentile(state.idle_ms, 99)},
      {"evals", state.evals},
  };
  if (!state.evals.empty()) {
    summary["heldout_accuracy_first"] = state.evals.front()["heldout_accuracy"];
    summary["heldout_accuracy_last"] = state.evals.back()["heldout_accuracy"];
    // The heldout_accuracy_last of an evaluation that lost episodes covers
    // only the answered ones: this count goes with it (and the final line says so).
    summary["heldout_errors_last"] = state.evals.back().value("errors", 0);
    report::add_summary_counts(summary, state.evals.front(), state.evals.back());
  }
  state.logprob_agreement.add_to_summary(summary);
  return summary;
}

void on_step(MetricsSelf self, const msg::StepReport& report) {
  auto& state = self->state;
  nlohmann::json line(report.metrics);
  line["step"] = report.step;
  line["policy_version"] = report.policy_version;
  line["episodes_lost"] = state.episodes_lost;
  line["env_restarts"] = state.env_restarts;
  line["rollout_restarts"] = state.rollout_restarts;
  for (const auto& [key, value] : state.knobs) line[key] = value;
  // JSON has no NaN; an undefined number is written as null.
  for (auto& item : line.items()) {
    if (item.value().is_number_float() && !std::isfinite(item.value().get<double>())) item.value() = nullptr;
  }
  state.writer->write(line);
  state.logprob_agreement.add_step(line);
  state.history.push_back(line);
  if (state.history.size() > kHistoryKeptSteps) state.history.pop_front();
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
                           {"heldout_accuracy", state.last_accuracy},
                           {"staleness", get("staleness_mean")},
                           {"dis_rej", get("dis_reject_low_frac") + get("dis_reject_high_frac")},
                           {"lost", static_cast<double>(state.episodes_lost)}},
                          get("tokens_per_s"), "tok");
  }
}
std::string utc_timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm parts{};
  gmtime_r(&now, &parts);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &parts);
  return text;
}

void on_control(MetricsSelf self, const msg::ControlEvent& event) {
  auto& state = self->state;
  nlohmann::json line = {{"event", event.command},  {"key", event.key},
                         {"value", event.value},    {"origin", event.origin},
                         {"step", state.last_step}, {"wall_time_s", state.progress->elapsed_seconds()},
                         {"time", utc_timestamp()}};
  state.writer->write(line);
  state.events.push_back(line);
  if (event.command == "set" && state.knobs.count(event.key)) state.knobs[event.key] = event.number;
  if (event.command == "pause") state.knobs["rollouts_paused"] = 1.0;
  if (event.command == "resume") state.knobs["rollouts_paused"] = 0.0;
  std::ofstream log(std::filesystem::path(state.config.run_dir) / "control.log", std::ios::app);
  log << line["time"].get<std::string>() << " step " << state.last_step << " " << event.command;
  if (!event.key.empty()) log << " " << event.key;
  if (!event.value.empty()) log << " " << event.value;
  log << " (from " << event.origin << ")\n";
}

report::MetricsHistory history_since(const MetricsActorState& state, int64_t since_step) {
  report::MetricsHistory history;
  size_t first = 0;
  while (first < state.history.size() && state.history[first]["step"].get<int64_t>() <= since_step) ++first;
  if (state.history.size() - first > kHistoryReplyLimit) first = state.history.size() - kHistoryReplyLimit;
  for (size_t i = first; i < state.history.size(); ++i) {
    history.steps.push_back(report::metrics_line_from_json(state.history[i], "metrics history"));
  }
  for (const auto& line : state.evals) history.evals.push_back(report::metrics_line_from_json(line, "evals"));
  for (const auto& line : state.events) history.events.push_back(report::metrics_line_from_json(line, "events"));
  history.knobs = state.knobs;
  history.has_latest = !state.history.empty();
  if (history.has_latest) history.latest = report::metrics_line_from_json(state.history.back(), "latest");
  auto summary = summary_of(state);
  summary.erase("evals");
  history.summary = report::metrics_line_from_json(summary, "summary");
  return history;
}
}  // namespace

// Continues the counters of the run being resumed from the lines kept up to
// its checkpoint; latency percentiles cover this process only.
void restore_from(MetricsActorState& state, report::RewoundMetrics rewound) {
  auto count = [](const nlohmann::json& line, const char* key) {
    return line.contains(key) && line[key].is_number() ? line[key].get<int64_t>() : int64_t{0};
  };
  state.last_step = state.config.resume_step;
  if (!rewound.steps.empty()) {
    const auto& last = rewound.steps.back();
    state.episodes_lost = count(last, "episodes_lost");
    state.env_restarts = count(last, "env_restarts");
    state.rollout_restarts = count(last, "rollout_restarts");
  }
  for (const auto& line : rewound.steps) {
    state.dropped_stale += count(line, "dropped_stale");
    state.logprob_agreement.add_step(line);
  }
  const size_t first = rewound.steps.size() > kHistoryKeptSteps ? rewound.steps.size() - kHistoryKeptSteps : 0;
  state.history.assign(rewound.steps.begin() + static_cast<std::ptrdiff_t>(first), rewound.steps.end());
  state.evals = std::move(rewound.evals);
  state.events = std::move(rewound.events);
  if (!state.evals.empty() && state.evals.back()["heldout_accuracy"].is_number())
    state.last_accuracy = state.evals.back()["heldout_accuracy"].get<double>();
  // A run resumed at (or past) its budget trains nothing and loses nothing.
  if (state.config.resume_step >= state.config.total_steps) return;
  // Nothing the checkpoint does not hold is trained again, so it is lost:
  // what was trained after it, what waited in replay, what was in flight.
  // Episodes lost after the checkpoint were counted in the lines moved out.
  const int64_t lost_after_checkpoint = std::max<int64_t>(0, rewound.lost_at_last_step - state.episodes_lost);
  const int64_t lost = rewound.trained_after_checkpoint + rewound.queued_at_last_step + lost_after_checkpoint +
                       state.config.in_flight_per_resume;
  state.episodes_lost += lost;
  state.resume_event = {{"event", "recovered"},
                        {"key", "episodes_lost_at_stop"},
                        {"value", std::to_string(lost)},
                        {"origin", "resume"},
                        {"step", state.config.resume_step},
                        {"episodes_lost_at_stop", lost},
                        {"trained_after_checkpoint", rewound.trained_after_checkpoint},
                        {"queued_at_last_step", rewound.queued_at_last_step},
                        {"lost_after_checkpoint", lost_after_checkpoint},
                        {"in_flight", state.config.in_flight_per_resume},
                        {"wall_time_s", 0.0},
                        {"time", utc_timestamp()}};
}

MetricsActor::behavior_type metrics_behavior(MetricsSelf self, MetricsActorConfig config) {
  auto& state = self->state;
  state.config = std::move(config);
  const auto metrics_path = (std::filesystem::path(state.config.run_dir) / "metrics.jsonl").string();
  if (state.config.resume_step >= 0) {
    auto rewound = report::rewind_metrics_file(metrics_path, state.config.resume_step);
    if (rewound.moved_lines > 0) {
      std::fprintf(stderr, "resume: %lld metrics line(s) written after the checkpoint (step %lld) moved to %s\n",
                   static_cast<long long>(rewound.moved_lines), static_cast<long long>(state.config.resume_step),
                   rewound.moved_to.c_str());
    }
    restore_from(state, std::move(rewound));
  }
  state.writer =
      std::make_unique<report::JsonlWriter>((std::filesystem::path(state.config.run_dir) / "metrics.jsonl").string());
  state.progress = std::make_unique<report::ProgressLine>("train", state.config.total_steps);
  state.progress->count_evaluations(state.config.eval_every, std::max<int64_t>(0, state.config.resume_step));
  if (!state.resume_event.is_null()) {
    state.writer->write(state.resume_event);
    state.events.push_back(state.resume_event);
  }
  state.knobs = {{"rollouts_paused", 0.0}};
  for (const auto& spec : config::knob_table()) {
    if (spec.owner == config::KnobOwner::kReplay) {
      state.knobs[spec.name] = config::replay_knob_value(state.config.replay, spec.knob);
    }
  }
  return counted_behavior<MetricsActor::behavior_type>(
      self, [self](const msg::StepReport& report) { on_step(self, report); },
      [self](const msg::ControlEvent& event) { on_control(self, event); },
      [self](atoms::history_atom, int64_t since_step) { return history_since(self->state, since_step); },
      [self](const msg::EvalReport& report) {
        auto& st = self->state;
        st.last_accuracy = report.accuracy;
        st.progress->add_evaluation(report.seconds);
        // The same policy evaluated twice (a run resumed at its budget, a
        // stop right after a scheduled eval) is one evaluation.
        if (!st.evals.empty() && st.evals.back()["step"] == report.step &&
            st.evals.back()["policy_version"] == report.policy_version) {
          return;
        }
        nlohmann::json line = {{"eval", true},
                               {"step", report.step},
                               {"policy_version", report.policy_version},
                               {"heldout_accuracy", report.accuracy},
                               {"total", report.total},
                               {"split", report.split},
                               {"wall_time_s", st.progress->elapsed_seconds()}};
        if (!std::isfinite(report.accuracy)) line["heldout_accuracy"] = nullptr;
        report::add_counts(line, report.counts);
        line["errors"] = report.errors;
        if (!report.env_dead.empty()) line["env_dead"] = report.env_dead;
        st.writer->write(line);
        st.evals.push_back(line);
        if (!report.env_dead.empty()) {
          std::fprintf(stderr, "eval step %lld: no held-out accuracy: %s\n", static_cast<long long>(report.step),
                       report.env_dead.c_str());
          return;
        }
        std::string counts;
        const auto reported = report::counts_of_eval_line(line);
        for (const auto& [name, value] : reported.items()) counts += ", " + name + " " + base::dump_json(value);
        std::fprintf(stderr, "eval step %lld: held-out accuracy %.4f (%lld problems%s)%s\n",
                     static_cast<long long>(report.step), report.accuracy, static_cast<long long>(report.total),
                     counts.c_str(), report::heldout_errors_note(report.errors, report.total).c_str());
      },
      [self](const msg::EpisodeLost& lost) {
        ++self->state.episodes_lost;
        self->state.counters.last_error =
            "episode lost in " + lost.rollout + " (" + msg::to_string(lost.cause) + "): " + lost.detail;
      },
      [self](const msg::ActorRestarted& restarted) {
        if (restarted.kind == "env") ++self->state.env_restarts;
        if (restarted.kind == "rollout") ++self->state.rollout_restarts;
      },
      [self](atoms::summary_atom, const std::vector<msg::ActorStatus>& statuses) {
        auto summary = summary_of(self->state);
        if (auto accounting = time_accounting_of(statuses); !accounting.is_null()) {
          summary["time_accounting"] = std::move(accounting);
        }
        if (auto weights = weight_sync_of(statuses); !weights.is_null()) summary["weight_sync"] = std::move(weights);
        // The run's summary is this file; RunFinished points at it instead of carrying its text.
        const auto path = (std::filesystem::path(self->state.config.run_dir) / "summary.json").string();
        std::ofstream out(path);
        out << base::dump_json(summary, 2) << "\n";
        return path;
      },
      [self](atoms::status_atom) {
        auto& st = self->state;
        return describe_actor(self, "metrics", "metrics", "idle", st.counters,
                              {{"last_step", static_cast<double>(st.last_step)},
                               {"episodes_lost", static_cast<double>(st.episodes_lost)},
                               {"heldout_accuracy", st.last_accuracy},
                               {"reward_ema", st.reward_ema},
                               {"control_events", static_cast<double>(st.events.size())}});
      });
}

MetricsActor spawn_metrics_actor(caf::actor_system& system, MetricsActorConfig config) {
  return system.spawn(metrics_behavior, std::move(config));
}

}  // namespace sao::actors
