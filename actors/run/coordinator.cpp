// Coordinator behaviour; see coordinator.hpp.
#include "actors/run/coordinator.hpp"
#include "actors/run/coordinator_state.hpp"

#include "actors/console/introspection_actor.hpp"
#include "actors/introspection.hpp"
#include "actors/run/env_actor.hpp"
#include "actors/run/learner_actor.hpp"
#include "actors/run/metrics_actor.hpp"
#include "actors/run/replay_actor.hpp"
#include "actors/run/rollout_actor.hpp"
#include "actors/run/weight_sync_actor.hpp"
#include "algo/learner.hpp"
#include "base/error.hpp"
#include "base/hash.hpp"
#include "config/live_knobs.hpp"
#include "tokenizer/load_tokenizer.hpp"

#include <chrono>
#include <map>
#include <set>
#include <tuple>

namespace sao::actors {

std::vector<RolloutActor> all_rollouts(const CoordinatorState& state) {
  std::vector<RolloutActor> rollouts = state.rollouts;
  for (const auto& item : state.remote_rollouts) rollouts.push_back(item.second);
  return rollouts;
}

namespace {

EnvActorConfig env_config(const config::RunConfig& run, size_t index) {
  EnvActorConfig config{"env-" + std::to_string(index), run.env.name, run.task_document, run.env.latency,
                        base::splitmix64(static_cast<uint64_t>(run.run.seed) ^ (0x1A7E0000ULL + index))};
  config.max_failures_in_a_row = run.train.max_env_failures_in_a_row;
  return config;
}

EnvActor spawn_env(CoordinatorSelf self, size_t index) {
  auto env = spawn_env_actor(self->system(), env_config(self->state.config.run, index));
  self->monitor(env);
  return env;
}

void finish(CoordinatorSelf self, msg::RunEnd reason);

// Ends the run through the normal finish (final evaluation, checkpoint,
// summary) with the failing actor's name and the error that began its streak.
void give_up(CoordinatorSelf self, const std::string& actor, const std::string& latest) {
  auto& state = self->state;
  if (state.stopping) return;
  const auto& train = state.config.run.train;
  const auto first = state.restart_budget->first_error(actor);
  state.end_detail = actor + " failed " + std::to_string(state.restart_budget->failures_in_window(actor)) +
                     " times within " + std::to_string(train.failure_window_s) + " s (train.max_actor_failures " +
                     std::to_string(train.max_actor_failures) + "); first error: " + (first.empty() ? latest : first);
  state.counters.last_error = state.end_detail;
  std::fprintf(stderr, "coordinator: giving up: %s\n", state.end_detail.c_str());
  finish(self, msg::RunEnd::kGaveUp);
}

// The environment is dead (an evaluation or an env actor found
// train.max_env_failures_in_a_row failures in a row): the run ends through
// its normal finish with that message.
void give_up_on_env(CoordinatorSelf self, const std::string& who, const std::string& detail) {
  auto& state = self->state;
  if (state.stopping) return;
  state.end_detail = who + ": " + detail;
  state.counters.last_error = state.end_detail;
  std::fprintf(stderr, "coordinator: giving up: %s\n", state.end_detail.c_str());
  finish(self, msg::RunEnd::kGaveUp);
}

RolloutActor spawn_rollout(CoordinatorSelf self, size_t index) {
  auto& config = self->state.rollout_configs[index];
  config.env = self->state.envs[index % self->state.envs.size()];
  auto rollout = spawn_rollout_actor(self->system(), config);
  self->monitor(rollout);
  return rollout;
}

void restart_env(CoordinatorSelf self, size_t index, const std::string& why) {
  auto& state = self->state;
  const auto timeout = std::chrono::milliseconds(state.config.run.rollout.env_timeout_ms);
  // Many episodes of one batch time out together: restart once per incident.
  if (std::chrono::steady_clock::now() - state.env_started[index] < timeout) return;
  if (state.config.agent_endpoint) {
    // Its sessions are the run's: a fresh one would know none of them.
    if (state.stopping) return;
    state.end_detail = "the agent endpoint failed: " + why;
    state.counters.last_error = state.end_detail;
    std::fprintf(stderr, "coordinator: giving up: %s\n", state.end_detail.c_str());
    finish(self, msg::RunEnd::kGaveUp);
    return;
  }
  const std::string name = "env-" + std::to_string(index);
  if (!state.restart_budget->allow_restart(name, why)) {
    give_up(self, name, why);
    return;
  }
  std::fprintf(stderr, "coordinator: restarting env-%zu (%s)\n", index, why.c_str());
  state.counters.last_error = "env-" + std::to_string(index) + ": " + why;
  state.envs_exiting.insert(state.envs[index].address());  // still monitored: its exit is awaited
  self->send_exit(state.envs[index], caf::exit_reason::kill);
  state.envs[index] = spawn_env(self, index);
  state.env_started[index] = std::chrono::steady_clock::now();
  ++state.env_restarts;
  self->send(state.metrics, msg::ActorRestarted{"env", "env-" + std::to_string(index)});
  for (size_t r = 0; r < state.rollouts.size(); ++r) {
    if (r % state.envs.size() == index) self->send(state.rollouts[r], atoms::env_atom_v, state.envs[index]);
  }
}

void start(CoordinatorSelf self) {
  auto& state = self->state;
  const auto& run = state.config.run;
  state.restart_budget =
      std::make_unique<RestartBudget>(run.train.max_actor_failures, std::chrono::seconds(run.train.failure_window_s));
  const int64_t local_rollouts = state.config.local_rollouts < 0 ? run.rollout.num_actors : state.config.local_rollouts;
  MetricsActorConfig metrics_config{run.run.dir, run.train.steps, run.train.eval_every, run.replay};
  if (!state.config.resume_from.empty()) {
    state.resume_step = algo::read_learner_state(state.config.resume_from).step;
    metrics_config.resume_step = state.resume_step;
    metrics_config.in_flight_per_resume = local_rollouts * run.rollout.slots;
    state.steps = state.resume_step;
  }
  state.metrics = spawn_metrics_actor(self->system(), metrics_config);
  state.introspection = spawn_introspection_actor(self->system(), caf::actor_cast<CoordinatorActor>(self));
  state.weight_sync =
      spawn_weight_sync_actor(self->system(), run.rollout.weight_delay_versions, state.config.bulk_server);
  // Watched like the learner: a run that lost one of these would wait forever.
  self->monitor(state.metrics);
  self->monitor(state.introspection);
  self->monitor(state.weight_sync);
  state.learner = spawn_learner_actor(
      self->system(),
      LearnerActorConfig{run, state.config.policy, state.config.resume_from, state.config.learner_ranks});
  state.config.policy = model::CausalLM{nullptr};  // the learner owns the weights now
  self->monitor(state.learner);
  state.replay = spawn_replay_actor(self->system(), run.replay, state.learner);
  self->monitor(state.replay);
  if (state.config.agent_endpoint) {
    self->monitor(state.config.agent_endpoint);
    state.envs.push_back(state.config.agent_endpoint);
    state.env_started.push_back(std::chrono::steady_clock::time_point{});
  } else {
    for (int64_t i = 0; i < run.rollout.env_actors; ++i) {
      state.envs.push_back(spawn_env(self, static_cast<size_t>(i)));
      state.env_started.push_back(std::chrono::steady_clock::time_point{});
    }
  }
  const auto shared_tokenizer = tokenizer::load_tokenizer(run.model_path, run.prompt_format);
  for (int64_t i = 0; i < local_rollouts; ++i) {
    auto config = rollout_config_from_run(run, "rollout-" + std::to_string(i), i, shared_tokenizer);
    config.env_is_agent_endpoint = static_cast<bool>(state.config.agent_endpoint);
    config.replay = state.replay;
    config.weight_sync = state.weight_sync;
    config.coordinator = caf::actor_cast<CoordinatorActor>(self);
    state.rollout_configs.push_back(config);
    state.rollouts.push_back(spawn_rollout(self, static_cast<size_t>(i)));
  }
  self->send(state.learner, atoms::start_atom_v, state.replay, state.weight_sync, state.metrics,
             caf::actor_cast<CoordinatorActor>(self));
}

void shutdown_children(CoordinatorSelf self) {
  auto& state = self->state;
  std::vector<caf::actor_addr> children = {state.metrics.address(), state.weight_sync.address(),
                                           state.learner.address(), state.replay.address(),
                                           state.introspection.address()};
  for (const auto& env : state.envs) {
    // Still monitored: end_run waits for each to exit.
    state.envs_exiting.insert(env.address());
    self->send_exit(env, caf::exit_reason::user_shutdown);
  }
  for (const auto& rollout : all_rollouts(state)) children.push_back(rollout.address());
  for (const auto& item : state.remote_envs) children.push_back(item.second.address());
  for (auto& child : children) {
    if (!child) continue;
    self->demonitor(child);
    self->send_exit(child, caf::exit_reason::user_shutdown);
  }
}

// Whoever started the run hears how it ended. The caller waits in a
// blocking (untyped) actor, hence anon_send.
void report_finished(CoordinatorSelf self) {
  auto& state = self->state;
  caf::anon_send(state.config.reply_to, std::move(*state.finished_pending));
  state.finished_pending.reset();
  self->quit();
}

// Ends the run: every child is told to exit, then (once every local env
// actor has exited) whoever started it hears how it ended.
void end_run(CoordinatorSelf self, msg::RunEnd end, std::string detail = "") {
  auto& state = self->state;
  if (detail.empty()) detail = state.end_detail;
  shutdown_children(self);
  state.finished_pending =
      std::make_unique<msg::RunFinished>(msg::RunFinished{state.steps, state.policy_version, end, std::move(detail)});
  if (state.envs_exiting.empty()) {
    report_finished(self);
    return;
  }
  std::fprintf(stderr, "coordinator: waiting for %zu env actor(s) to return from their environment call\n",
               state.envs_exiting.size());
}

// An env actor told to exit has exited: true if it was one (then handled).
bool env_exited(CoordinatorSelf self, const caf::actor_addr& source) {
  auto& state = self->state;
  if (state.envs_exiting.erase(source) == 0) return false;
  if (state.envs_exiting.empty() && state.finished_pending) report_finished(self);
  return true;
}

void stop_metrics(CoordinatorSelf self, msg::RunEnd end, const std::vector<msg::ActorStatus>& statuses) {
  // The summary (RUN_DIR/summary.json) is written before the run is reported finished.
  self->request(self->state.metrics, std::chrono::seconds(30), atoms::summary_atom_v, statuses)
      .then([self, end](const std::string&) { end_run(self, end); },
            [self, end](const caf::error&) { end_run(self, end); });
}

void finish(CoordinatorSelf self, msg::RunEnd reason) {
  auto& state = self->state;
  if (state.stopping) return;
  state.stopping = true;
  for (auto& rollout : all_rollouts(state)) self->send(rollout, atoms::pause_atom_v);
  self->request(state.learner, caf::infinite, atoms::final_eval_atom_v)
      .then(
          [self, reason](const msg::EvalReport&) {
            // Every actor's time accounting goes into summary.json; when the
            // snapshot fails the summary is written without it.
            self->request(self->state.introspection, kStatusTimeout * 2, atoms::snapshot_atom_v)
                .then([self,
                       reason](const std::vector<msg::ActorStatus>& statuses) { stop_metrics(self, reason, statuses); },
                      [self, reason](const caf::error&) { stop_metrics(self, reason, {}); });
          },
          [self](const caf::error& error) {
            end_run(self, msg::RunEnd::kFinalCheckpointFailed, self->system().render(error));
          });
}

void on_down(CoordinatorSelf self, const caf::down_msg& down) {
  auto& state = self->state;
  if (env_exited(self, down.source)) return;
  if (state.stopping) return;
  const std::string why = self->system().render(down.reason);
  for (size_t i = 0; i < state.envs.size(); ++i) {
    if (state.envs[i].address() != down.source) continue;
    state.env_started[i] = std::chrono::steady_clock::time_point{};  // a crash always restarts
    restart_env(self, i, "exited: " + why);
    return;
  }
  for (size_t i = 0; i < state.rollouts.size(); ++i) {
    if (state.rollouts[i].address() != down.source) continue;
    const std::string name = "rollout-" + std::to_string(i);
    if (!state.restart_budget->allow_restart(name, "exited: " + why)) {
      give_up(self, name, "exited: " + why);
      return;
    }
    std::fprintf(stderr, "coordinator: restarting rollout-%zu (exited: %s)\n", i, why.c_str());
    state.rollouts[i] = spawn_rollout(self, i);
    if (state.rollouts_paused) self->send(state.rollouts[i], atoms::pause_atom_v);
    state.counters.last_error = "rollout-" + std::to_string(i) + " exited: " + why;
    ++state.rollout_restarts;
    self->send(state.metrics, msg::ActorRestarted{"rollout", "rollout-" + std::to_string(i)});
    return;
  }
  if (on_remote_down(self, down, why)) return;
  // The run's single actors have no restart (their state is the run's): one
  // that exits (a metrics file that cannot be written, a bug) ends the run
  // through its normal finish, so the learner still saves its checkpoint.
  const std::pair<caf::actor_addr, const char*> singles[] = {{state.metrics.address(), "metrics"},
                                                             {state.replay.address(), "replay"},
                                                             {state.weight_sync.address(), "weight-sync"},
                                                             {state.introspection.address(), "introspection"}};
  for (const auto& [address, name] : singles) {
    if (address != down.source) continue;
    state.end_detail = std::string("the ") + name + " actor exited (" + why + ")";
    state.counters.last_error = state.end_detail;
    std::fprintf(stderr, "coordinator: giving up: %s\n", state.end_detail.c_str());
    finish(self, msg::RunEnd::kGaveUp);
    return;
  }
  if (state.learner.address() == down.source) {
    std::fprintf(stderr, "coordinator: the learner exited (%s); ending the run\n", why.c_str());
    state.stopping = true;
    end_run(self, msg::RunEnd::kLearnerFailed, why);
  }
}
// Every actor of the run with a display name, the coordinator first.
std::pair<std::vector<StatusActor>, std::vector<std::string>> list_actors(CoordinatorSelf self) {
  auto& state = self->state;
  std::vector<StatusActor> actors = {caf::actor_cast<StatusActor>(self),
                                     state.learner,
                                     state.replay,
                                     state.weight_sync,
                                     state.metrics,
                                     state.introspection};
  std::vector<std::string> names = {"coordinator", "learner", "replay", "weight-sync", "metrics", "introspection"};
  for (size_t i = 0; i < state.rollouts.size(); ++i) {
    actors.push_back(state.rollouts[i]);
    names.push_back(state.rollout_configs[i].name);
  }
  for (size_t i = 0; i < state.envs.size(); ++i) {
    actors.push_back(state.envs[i]);
    names.push_back("env-" + std::to_string(i));
  }
  // Cluster nodes' actors, named "<node>/rollout-<i>", "<node>/env-<i>".
  for (const auto& [name, actor] : state.remote_rollouts) {
    actors.push_back(actor);
    names.push_back(name);
  }
  for (const auto& [name, actor] : state.remote_envs) {
    actors.push_back(actor);
    names.push_back(name);
  }
  return {actors, names};
}

void record_control(CoordinatorSelf self, msg::ControlEvent event) {
  self->send(self->state.metrics, std::move(event));
}

void set_rollouts_paused(CoordinatorSelf self, bool paused, const std::string& origin) {
  auto& state = self->state;
  state.rollouts_paused = paused;
  for (auto& rollout : all_rollouts(state)) {
    if (paused) {
      self->send(rollout, atoms::pause_atom_v);
    } else {
      self->send(rollout, atoms::resume_atom_v);
    }
  }
  record_control(self, msg::ControlEvent{paused ? "pause" : "resume", "rollouts", "", origin, 0.0});
}

// Applies a live knob through its one owner (the replay validates against
// the rest of the replay config), then logs it. The reply names what
// changed, or the owner's refusal.
caf::typed_response_promise<std::string> set_knob(CoordinatorSelf self, const std::string& key, const std::string& text,
                                                  const std::string& origin) {
  auto promise = self->make_response_promise<std::string>();
  config::KnobChange change;
  try {
    change = config::parse_knob_change(key, text);
  } catch (const Error& error) {
    self->state.counters.last_error = error.what();
    promise.deliver(msg::make_error(msg::Errc::kRefused, error.what()));
    return promise;
  }
  // Exactly one actor owns each knob (config::knob_table()).
  auto applied = [self, promise, change, key, text, origin](const std::string&) mutable {
    record_control(self, msg::ControlEvent{"set", key, text, origin, change.value});
    promise.deliver(std::string("set " + key + " = " + text));
  };
  auto refused = [promise](const caf::error& error) mutable { promise.deliver(error); };
  const msg::SetKnob message{change.knob, change.value};
  if (config::spec_of(change.knob).owner == config::KnobOwner::kLearner) {
    self->request(self->state.learner, std::chrono::seconds(30), message).then(applied, refused);
  } else {
    self->request(self->state.replay, std::chrono::seconds(5), message).then(applied, refused);
  }
  return promise;
}
}  // namespace

namespace {
// The coordinator's handlers by concern; coordinator_behavior joins them.

// The run's course: steps, evaluations, lost episodes, and the signals of
// the process that started it.
auto run_handlers(CoordinatorSelf self) {
  return std::make_tuple(
      [self](const msg::StepReport& report) {
        self->state.steps = report.step;
        self->state.policy_version = report.policy_version;
        self->state.lost_in_a_row = 0;
        // Drifting environments change their rule with the learner's progress.
        for (auto& env : self->state.envs) self->send(env, atoms::train_step_atom_v, report.step);
        for (auto& item : self->state.remote_envs) self->send(item.second, atoms::train_step_atom_v, report.step);
        if (report.step >= self->state.config.run.train.steps) {
          finish(self, msg::RunEnd::kBudget);
          return;
        }
        // Sync mode: rollouts start a round when new weights arrive; a step
        // that made none (critic warm-up, a skipped step) releases it here.
        if (self->state.config.run.replay.synchronous && !report.policy_updated) {
          for (auto& rollout : all_rollouts(self->state)) {
            self->send(rollout, atoms::learner_idle_atom_v, report.policy_version);
          }
        }
      },
      [self](const msg::EvalReport& report) {
        if (!report.env_dead.empty()) give_up_on_env(self, "held-out evaluation", report.env_dead);
      },
      [self](const msg::EpisodeLost& lost) {
        auto& state = self->state;
        ++state.episodes_lost;
        self->send(state.metrics, lost);
        if (lost.cause == msg::LossCause::kEnvDead) {
          give_up_on_env(self, lost.rollout, lost.detail);
          return;
        }
        if (state.lost_in_a_row++ == 0) {
          state.first_lost = lost.rollout + " (" + msg::to_string(lost.cause) + "): " + lost.detail;
        }
        const int64_t limit = state.config.run.train.max_lost_in_a_row;
        if (limit > 0 && state.lost_in_a_row >= limit && !state.stopping) {
          state.end_detail =
              std::to_string(state.lost_in_a_row) +
              " episodes lost in a row with no learner step (train.max_lost_in_a_row); the first: " + state.first_lost;
          state.counters.last_error = state.end_detail;
          std::fprintf(stderr, "coordinator: giving up: %s\n", state.end_detail.c_str());
          finish(self, msg::RunEnd::kGaveUp);
          return;
        }
        if (lost.cause != msg::LossCause::kEnvTimeout) return;
        for (size_t i = 0; i < state.rollout_configs.size(); ++i) {
          if (state.rollout_configs[i].name == lost.rollout) restart_env(self, i % state.envs.size(), lost.detail);
        }
      },
      [self](atoms::stop_atom) { finish(self, msg::RunEnd::kStopped); },
      [self](atoms::pause_atom) { set_rollouts_paused(self, true, "local"); },
      [self](atoms::resume_atom) { set_rollouts_paused(self, false, "local"); });
}

// Operator commands (console, HTTP): the origin goes into control.log.
auto control_handlers(CoordinatorSelf self) {
  return std::make_tuple(
      [self](atoms::pause_atom, const std::string& origin) {
        set_rollouts_paused(self, true, origin);
        return std::string("rollouts paused (episodes in flight finish first)");
      },
      [self](atoms::resume_atom, const std::string& origin) {
        set_rollouts_paused(self, false, origin);
        return std::string("rollouts resumed");
      },
      [self](atoms::stop_atom, const std::string& origin) {
        record_control(self, msg::ControlEvent{"stop", "", "", origin, 0.0});
        finish(self, msg::RunEnd::kStopped);
        return std::string("stopping: final evaluation and checkpoint, then exit");
      },
      [self](atoms::checkpoint_atom, const std::string& origin) {
        auto promise = self->make_response_promise<std::string>();
        self->request(self->state.learner, std::chrono::minutes(5), atoms::checkpoint_atom_v)
            .then(
                [self, promise, origin](const std::string& dir) mutable {
                  record_control(self, msg::ControlEvent{"checkpoint", "", dir, origin, 0.0});
                  promise.deliver(std::string("checkpoint written to ") + dir);
                },
                [promise](const caf::error& error) mutable { promise.deliver(error); });
        return promise;
      },
      [self](atoms::set_atom, const std::string& key, const std::string& value, const std::string& origin) {
        return set_knob(self, key, value, origin);
      });
}

// What the console asks about the run's actors.
auto introspection_handlers(CoordinatorSelf self) {
  return std::make_tuple(
      [self](atoms::actors_atom) -> caf::result<std::vector<StatusActor>, std::vector<std::string>> {
        auto [actors, names] = list_actors(self);
        return {std::move(actors), std::move(names)};
      },
      [self](atoms::snapshot_atom) { return self->delegate(self->state.introspection, atoms::snapshot_atom_v); },
      [self](atoms::history_atom, int64_t since_step) {
        return self->delegate(self->state.metrics, atoms::history_atom_v, since_step);
      },
      [self](atoms::status_atom) {
        auto& state = self->state;
        return describe_actor(self, "coordinator", "coordinator", state.stopping ? "stopping" : "running",
                              state.counters,
                              {{"steps", static_cast<double>(state.steps)},
                               {"rollouts_paused", state.rollouts_paused ? 1.0 : 0.0},
                               {"policy_version", static_cast<double>(state.policy_version)},
                               {"episodes_lost", static_cast<double>(state.episodes_lost)},
                               {"env_restarts", static_cast<double>(state.env_restarts)},
                               {"rollout_restarts", static_cast<double>(state.rollout_restarts)},
                               {"rollouts", static_cast<double>(state.rollouts.size())},
                               {"envs", static_cast<double>(state.envs.size())}});
      },
      [self](atoms::versions_atom) { return self->delegate(self->state.weight_sync, atoms::versions_atom_v); });
}

// Cluster membership (the work is in coordinator_cluster.cpp).
auto membership_handlers(CoordinatorSelf self) {
  return std::make_tuple(
      [self](atoms::join_atom, atoms::status_atom) { return cluster_status(self); },
      // The actors a joining node talks to.
      [self](atoms::join_atom) -> caf::result<ReplayActor, WeightSyncActor> {
        return {self->state.replay, self->state.weight_sync};
      },
      [self](atoms::join_atom, const std::string& node_name) { return node_using_name(self, node_name); },
      [self](atoms::join_atom, atoms::rollout_atom, const std::string& name, const RolloutActor& rollout,
             bool needs_env) { rollout_joined(self, name, rollout, needs_env); },
      [self](atoms::join_atom, atoms::env_atom, const std::string& name, const EnvActor& env, bool from_env_node) {
        env_joined(self, name, env, from_env_node);
      });
}
}  // namespace

CoordinatorActor::behavior_type coordinator_behavior(CoordinatorSelf self, CoordinatorConfig config) {
  self->state.config = std::move(config);
  self->set_down_handler([self](const caf::down_msg& down) { on_down(self, down); });
  start(self);
  // A resumed run whose checkpoint is at (or past) the budget trains nothing more.
  if (self->state.resume_step >= self->state.config.run.train.steps) finish(self, msg::RunEnd::kBudget);
  return std::apply(
      [self](auto... handlers) {
        return counted_behavior<CoordinatorActor::behavior_type>(self, std::move(handlers)...);
      },
      std::tuple_cat(run_handlers(self), control_handlers(self), introspection_handlers(self),
                     membership_handlers(self)));
}

CoordinatorActor spawn_coordinator(caf::actor_system& system, CoordinatorConfig config) {
  return system.spawn(coordinator_behavior, std::move(config));
}

}  // namespace sao::actors
