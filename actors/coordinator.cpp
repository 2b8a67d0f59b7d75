// Coordinator behaviour; see coordinator.hpp.
#include "actors/coordinator.hpp"

#include "actors/env_actor.hpp"
#include "actors/introspection.hpp"
#include "actors/introspection_actor.hpp"
#include "actors/learner_actor.hpp"
#include "actors/metrics_actor.hpp"
#include "actors/replay_actor.hpp"
#include "actors/rollout_actor.hpp"
#include "actors/weight_sync_actor.hpp"
#include "base/error.hpp"
#include "config/live_knobs.hpp"

#include <chrono>
#include <map>
#include <set>

namespace sao::actors {

struct CoordinatorState {
  CoordinatorConfig config;
  caf::actor metrics, weight_sync, learner, replay, introspection;
  std::vector<caf::actor> envs;
  std::vector<std::chrono::steady_clock::time_point> env_started;
  std::vector<caf::actor> rollouts;
  std::vector<RolloutActorConfig> rollout_configs;
  // Actors of cluster nodes (actors/cluster.hpp): monitored, never restarted
  // here (their node rejoins), and told about pauses and the end of the run.
  std::map<std::string, caf::actor> remote_rollouts;
  std::map<std::string, caf::actor> remote_envs;  // every remote env hears the learner's step
  // Env nodes' envs serve the rollouts that have none of their own:
  // rollout -> the env it was given ("" while there is none).
  std::set<std::string> env_node_envs;
  std::map<std::string, std::string> env_of_rollout;
  int64_t remote_rollouts_lost = 0;
  bool stopping = false;
  bool rollouts_paused = false;
  ActorCounters counters;
  int64_t steps = 0;
  int64_t policy_version = 0;
  int64_t episodes_lost = 0;
  int64_t env_restarts = 0;
  int64_t rollout_restarts = 0;
  static inline const char* name = "coordinator";
};

namespace {
using Self = caf::stateful_actor<CoordinatorState>*;

EnvActorConfig env_config(const config::RunConfig& run, size_t index) {
  return {"env-" + std::to_string(index), run.env.name, run.task_document};
}

caf::actor spawn_env(Self self, size_t index) {
  auto env = spawn_env_actor(self->system(), env_config(self->state.config.run, index));
  self->monitor(env);
  return env;
}

caf::actor spawn_rollout(Self self, size_t index) {
  auto& config = self->state.rollout_configs[index];
  config.env = self->state.envs[index % self->state.envs.size()];
  auto rollout = spawn_rollout_actor(self->system(), config);
  self->monitor(rollout);
  return rollout;
}

void restart_env(Self self, size_t index, const std::string& why) {
  auto& state = self->state;
  const auto timeout = std::chrono::milliseconds(state.config.run.rollout.env_timeout_ms);
  // Many episodes of one batch time out together: restart once per incident.
  if (std::chrono::steady_clock::now() - state.env_started[index] < timeout) return;
  std::fprintf(stderr, "coordinator: restarting env-%zu (%s)\n", index, why.c_str());
  state.counters.last_error = "env-" + std::to_string(index) + ": " + why;
  self->demonitor(state.envs[index]);
  self->send_exit(state.envs[index], caf::exit_reason::kill);
  state.envs[index] = spawn_env(self, index);
  state.env_started[index] = std::chrono::steady_clock::now();
  ++state.env_restarts;
  self->send(state.metrics, atoms::register_atom_v, std::string("env_restart"));
  for (size_t r = 0; r < state.rollouts.size(); ++r) {
    if (r % state.envs.size() == index) self->send(state.rollouts[r], atoms::register_atom_v, state.envs[index]);
  }
}

void start(Self self) {
  auto& state = self->state;
  const auto& run = state.config.run;
  state.metrics = spawn_metrics_actor(self->system(), MetricsActorConfig{run.run.dir, run.train.steps, run.replay});
  state.introspection = spawn_introspection_actor(self->system(), self);
  state.weight_sync = spawn_weight_sync_actor(self->system());
  state.learner =
      spawn_learner_actor(self->system(), LearnerActorConfig{run, state.config.policy, state.config.resume_from});
  state.config.policy = model::CausalLM{nullptr};  // the learner owns the weights now
  self->monitor(state.learner);
  state.replay = spawn_replay_actor(self->system(), run.replay, state.learner);
  for (int64_t i = 0; i < run.rollout.env_actors; ++i) {
    state.envs.push_back(spawn_env(self, static_cast<size_t>(i)));
    state.env_started.push_back(std::chrono::steady_clock::time_point{});
  }
  const int64_t local_rollouts = state.config.local_rollouts < 0 ? run.rollout.num_actors : state.config.local_rollouts;
  for (int64_t i = 0; i < local_rollouts; ++i) {
    auto config = rollout_config_from_run(run, "rollout-" + std::to_string(i), i);
    config.replay = state.replay;
    config.weight_sync = state.weight_sync;
    config.coordinator = self;
    state.rollout_configs.push_back(config);
    state.rollouts.push_back(spawn_rollout(self, static_cast<size_t>(i)));
  }
  self->send(state.learner, atoms::start_atom_v, state.replay, state.weight_sync, state.metrics, caf::actor{self});
}

// Local and remote rollout actors.
std::vector<caf::actor> all_rollouts(const CoordinatorState& state) {
  std::vector<caf::actor> rollouts = state.rollouts;
  for (const auto& item : state.remote_rollouts) rollouts.push_back(item.second);
  return rollouts;
}

void shutdown_children(Self self) {
  auto& state = self->state;
  std::vector<caf::actor> children = {state.metrics, state.weight_sync, state.learner, state.replay,
                                      state.introspection};
  children.insert(children.end(), state.envs.begin(), state.envs.end());
  const auto rollouts = all_rollouts(state);
  children.insert(children.end(), rollouts.begin(), rollouts.end());
  for (const auto& item : state.remote_envs) children.push_back(item.second);
  for (auto& child : children) {
    if (!child) continue;
    self->demonitor(child);
    self->send_exit(child, caf::exit_reason::user_shutdown);
  }
}

void stop_metrics(Self self, const std::string& reason, const std::vector<msg::ActorStatus>& statuses) {
  self->request(self->state.metrics, std::chrono::seconds(30), atoms::stop_atom_v, statuses)
      .then(
          [self, reason](const std::string& summary) {
            shutdown_children(self);
            self->send(self->state.config.reply_to,
                       msg::RunFinished{self->state.steps, self->state.policy_version, reason + "\n" + summary});
            self->quit();
          },
          [self, reason](const caf::error&) {
            shutdown_children(self);
            self->send(self->state.config.reply_to,
                       msg::RunFinished{self->state.steps, self->state.policy_version, reason});
            self->quit();
          });
}

void finish(Self self, const std::string& reason) {
  auto& state = self->state;
  if (state.stopping) return;
  state.stopping = true;
  for (auto& rollout : all_rollouts(state)) self->send(rollout, atoms::pause_atom_v);
  self->request(state.learner, caf::infinite, atoms::stop_atom_v)
      .then(
          [self, reason](const msg::EvalReport&) {
            // Every actor's time accounting goes into summary.json; when the
            // snapshot fails the summary is written without it.
            self->request(self->state.introspection, kStatusTimeout * 2, atoms::snapshot_atom_v)
                .then([self,
                       reason](const std::vector<msg::ActorStatus>& statuses) { stop_metrics(self, reason, statuses); },
                      [self, reason](const caf::error&) { stop_metrics(self, reason, {}); });
          },
          [self, reason](const caf::error& error) {
            shutdown_children(self);
            self->send(self->state.config.reply_to,
                       msg::RunFinished{self->state.steps, self->state.policy_version,
                                        reason + " (final checkpoint failed: " + self->system().render(error) + ")"});
            self->quit();
          });
}

// Gives a rollout without envs of its own the env node env that serves the
// fewest rollouts, or none (it then idles) while no env node is connected.
void assign_env_node_env(Self self, const std::string& rollout) {
  auto& state = self->state;
  std::map<std::string, int64_t> load;
  for (const auto& env : state.env_node_envs) load[env] = 0;
  for (const auto& item : state.env_of_rollout) {
    if (item.first != rollout && load.count(item.second) > 0) ++load[item.second];
  }
  std::string best;
  for (const auto& [env, served] : load) {
    if (best.empty() || served < load[best]) best = env;
  }
  state.env_of_rollout[rollout] = best;
  if (best.empty()) std::fprintf(stderr, "coordinator: %s waits for an env node\n", rollout.c_str());
  self->send(state.remote_rollouts[rollout], atoms::register_atom_v,
             best.empty() ? caf::actor{} : state.remote_envs[best]);
}

// A cluster node's actor ended (its node stopped, crashed or disconnected).
// The episodes its rollout had in flight are gone: counted as one batch.
bool on_remote_down(Self self, const caf::down_msg& down, const std::string& why) {
  auto& state = self->state;
  for (auto it = state.remote_envs.begin(); it != state.remote_envs.end(); ++it) {
    if (it->second.address() != down.source) continue;
    std::fprintf(stderr, "coordinator: remote %s left (%s)\n", it->first.c_str(), why.c_str());
    const std::string env = it->first;
    state.remote_envs.erase(it);
    if (state.env_node_envs.erase(env) > 0) {
      for (auto& [rollout, assigned] : state.env_of_rollout) {
        if (assigned == env) assign_env_node_env(self, rollout);
      }
    }
    return true;
  }
  for (auto it = state.remote_rollouts.begin(); it != state.remote_rollouts.end(); ++it) {
    if (it->second.address() != down.source) continue;
    const int64_t in_flight = state.config.run.rollout.episodes_per_actor;
    std::fprintf(stderr, "coordinator: remote %s left (%s); counting its %lld in-flight episodes as lost\n",
                 it->first.c_str(), why.c_str(), static_cast<long long>(in_flight));
    ++state.remote_rollouts_lost;
    state.episodes_lost += in_flight;
    for (int64_t i = 0; i < in_flight; ++i) self->send(state.metrics, msg::EpisodeLost{it->first, "node lost"});
    state.env_of_rollout.erase(it->first);
    state.remote_rollouts.erase(it);
    return true;
  }
  return false;
}

void on_down(Self self, const caf::down_msg& down) {
  auto& state = self->state;
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
    std::fprintf(stderr, "coordinator: restarting rollout-%zu (exited: %s)\n", i, why.c_str());
    state.rollouts[i] = spawn_rollout(self, i);
    if (state.rollouts_paused) self->send(state.rollouts[i], atoms::pause_atom_v);
    state.counters.last_error = "rollout-" + std::to_string(i) + " exited: " + why;
    ++state.rollout_restarts;
    self->send(state.metrics, atoms::register_atom_v, std::string("rollout_restart"));
    return;
  }
  if (on_remote_down(self, down, why)) return;
  if (state.learner.address() == down.source) {
    std::fprintf(stderr, "coordinator: the learner exited (%s); ending the run\n", why.c_str());
    state.stopping = true;
    shutdown_children(self);
    self->send(state.config.reply_to, msg::RunFinished{state.steps, state.policy_version, "learner failed: " + why});
    self->quit();
  }
}
void register_remote(Self self, std::map<std::string, caf::actor>& registry, const std::string& name,
                     const caf::actor& actor) {
  // A node that rejoins under its old name replaces its previous actor.
  auto it = registry.find(name);
  if (it != registry.end()) self->demonitor(it->second);
  registry[name] = actor;
  self->monitor(actor);
  std::fprintf(stderr, "coordinator: remote %s joined\n", name.c_str());
}

// Every actor of the run with a display name, the coordinator first.
std::pair<std::vector<caf::actor>, std::vector<std::string>> list_actors(Self self) {
  auto& state = self->state;
  std::vector<caf::actor> actors = {self,          state.learner,      state.replay, state.weight_sync,
                                    state.metrics, state.introspection};
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
  for (const auto* registry : {&state.remote_rollouts, &state.remote_envs}) {
    for (const auto& [key, actor] : *registry) {
      actors.push_back(actor);
      names.push_back(key.substr(key.find(' ') + 1));
    }
  }
  return {actors, names};
}

void record_control(Self self, msg::ControlEvent event) {
  self->send(self->state.metrics, std::move(event));
}

void set_rollouts_paused(Self self, bool paused, const std::string& origin) {
  auto& state = self->state;
  state.rollouts_paused = paused;
  for (auto& rollout : all_rollouts(state)) {
    if (paused) {
      self->send(rollout, atoms::pause_atom_v);
    } else {
      self->send(rollout, atoms::resume_atom_v);
    }
  }
  record_control(self, msg::ControlEvent{paused ? "pause" : "resume", "rollouts", "", origin});
}

// Applies a live knob: replay first (it validates against the rest of the
// replay config), then the learner, then logs it. The reply names what
// changed, or the error of the first part that refused.
caf::response_promise set_knob(Self self, const std::string& key, const std::string& text, const std::string& origin) {
  auto promise = self->make_response_promise();
  config::KnobChange change;
  try {
    change = config::parse_knob_change(key, text);
  } catch (const Error& error) {
    self->state.counters.last_error = error.what();
    promise.deliver(caf::make_error(caf::sec::runtime_error, error.what()));
    return promise;
  }
  auto on_learner = [self, promise, change, text, origin]() mutable {
    auto finish = [self, promise, change, text, origin]() mutable {
      record_control(self, msg::ControlEvent{"set", change.key, text, origin});
      promise.deliver(std::string("set " + change.key + " = " + text));
    };
    if (!change.for_learner) return finish();
    self->request(self->state.learner, std::chrono::seconds(30), atoms::set_atom_v, change.key, change.value)
        .then([finish](const std::string&) mutable { finish(); },
              [promise](const caf::error& error) mutable { promise.deliver(error); });
  };
  if (!change.for_replay) {
    on_learner();
    return promise;
  }
  self->request(self->state.replay, std::chrono::seconds(5), atoms::set_atom_v, change.key, change.value)
      .then([on_learner](const std::string&) mutable { on_learner(); },
            [promise](const caf::error& error) mutable { promise.deliver(error); });
  return promise;
}
}  // namespace

caf::behavior coordinator_actor(caf::stateful_actor<CoordinatorState>* self, CoordinatorConfig config) {
  self->state.config = std::move(config);
  self->set_down_handler([self](const caf::down_msg& down) { on_down(self, down); });
  start(self);
  if (self->state.config.run.train.steps == 0) finish(self, "budget");
  return {
      [self](const msg::StepReport& report) {
        ++self->state.counters.handled;
        self->state.steps = report.step;
        self->state.policy_version = report.policy_version;
        // Drifting environments change their rule with the learner's progress.
        for (auto& env : self->state.envs) self->send(env, atoms::train_step_atom_v, report.step);
        for (auto& item : self->state.remote_envs) self->send(item.second, atoms::train_step_atom_v, report.step);
        if (report.step >= self->state.config.run.train.steps) finish(self, "budget");
      },
      [self](const msg::EpisodeLost& lost) {
        auto& state = self->state;
        ++state.counters.handled;
        ++state.episodes_lost;
        self->send(state.metrics, lost);
        if (lost.reason.find("timeout") == std::string::npos) return;
        for (size_t i = 0; i < state.rollout_configs.size(); ++i) {
          if (state.rollout_configs[i].name == lost.rollout) restart_env(self, i % state.envs.size(), lost.reason);
        }
      },
      [self](atoms::stop_atom) {
        ++self->state.counters.handled;
        finish(self, "stopped on request");
      },
      [self](atoms::pause_atom) {
        ++self->state.counters.handled;
        set_rollouts_paused(self, true, "local");
      },
      [self](atoms::resume_atom) {
        ++self->state.counters.handled;
        set_rollouts_paused(self, false, "local");
      },
      // Operator commands (console, HTTP): the origin goes into control.log.
      [self](atoms::pause_atom, const std::string& origin) {
        ++self->state.counters.handled;
        set_rollouts_paused(self, true, origin);
        return std::string("rollouts paused (episodes in flight finish first)");
      },
      [self](atoms::resume_atom, const std::string& origin) {
        ++self->state.counters.handled;
        set_rollouts_paused(self, false, origin);
        return std::string("rollouts resumed");
      },
      [self](atoms::stop_atom, const std::string& origin) {
        ++self->state.counters.handled;
        record_control(self, msg::ControlEvent{"stop", "", "", origin});
        finish(self, "stopped on request");
        return std::string("stopping: final evaluation and checkpoint, then exit");
      },
      [self](atoms::checkpoint_atom, const std::string& origin) {
        ++self->state.counters.handled;
        auto promise = self->make_response_promise();
        self->request(self->state.learner, std::chrono::minutes(5), atoms::checkpoint_atom_v)
            .then(
                [self, promise, origin](const std::string& dir) mutable {
                  record_control(self, msg::ControlEvent{"checkpoint", "", dir, origin});
                  promise.deliver("checkpoint written to " + dir);
                },
                [promise](const caf::error& error) mutable { promise.deliver(error); });
        return promise;
      },
      [self](atoms::set_atom, const std::string& key, const std::string& value, const std::string& origin) {
        ++self->state.counters.handled;
        return set_knob(self, key, value, origin);
      },
      [self](atoms::actors_atom) {
        ++self->state.counters.handled;
        auto [actors, names] = list_actors(self);
        return caf::make_message(std::move(actors), std::move(names));
      },
      [self](atoms::snapshot_atom) {
        ++self->state.counters.handled;
        return self->delegate(self->state.introspection, atoms::snapshot_atom_v);
      },
      [self](atoms::history_atom, int64_t since_step) {
        ++self->state.counters.handled;
        return self->delegate(self->state.metrics, atoms::history_atom_v, since_step);
      },
      [self](atoms::status_atom) {
        auto& state = self->state;
        ++state.counters.handled;
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
      [self](atoms::versions_atom) { return self->delegate(self->state.weight_sync, atoms::versions_atom_v); },
      // Cluster: membership numbers (the gatekeeper's status file), the actors
      // a joining node talks to, then its actors' registration.
      [self](atoms::join_atom, atoms::status_atom) {
        ++self->state.counters.handled;
        const auto& state = self->state;
        return describe_actor(self, "coordinator", "cluster", state.stopping ? "stopping" : "running", state.counters,
                              {{"remote_rollouts", static_cast<double>(state.remote_rollouts.size())},
                               {"remote_rollouts_lost", static_cast<double>(state.remote_rollouts_lost)},
                               {"remote_envs", static_cast<double>(state.remote_envs.size())},
                               {"env_node_envs", static_cast<double>(state.env_node_envs.size())}});
      },
      [self](atoms::join_atom) -> caf::result<caf::actor, caf::actor> {
        ++self->state.counters.handled;
        return {self->state.replay, self->state.weight_sync};
      },
      // The process whose actors use a node name now (none: a default
      // node_id); registry keys are "rollout NAME/rollout-i", "env NAME/env-i".
      [self](atoms::join_atom, const std::string& node_name) -> caf::node_id {
        ++self->state.counters.handled;
        const std::string infix = " " + node_name + "/";
        for (const auto* registry : {&self->state.remote_rollouts, &self->state.remote_envs}) {
          for (const auto& [key, actor] : *registry) {
            if (key.find(infix) == key.find(' ')) return actor.node();
          }
        }
        return caf::node_id{};
      },
      // needs_env: the rollout's node has no envs; an env node's env serves it.
      [self](atoms::join_atom, atoms::rollout_atom, const std::string& name, const caf::actor& rollout,
             bool needs_env) {
        ++self->state.counters.handled;
        const std::string key = "rollout " + name;
        register_remote(self, self->state.remote_rollouts, key, rollout);
        if (self->state.stopping || self->state.rollouts_paused) self->send(rollout, atoms::pause_atom_v);
        if (needs_env) assign_env_node_env(self, key);
      },
      // from_env_node: an env node's env, shared by rollouts that need one.
      [self](atoms::join_atom, atoms::env_atom, const std::string& name, const caf::actor& env, bool from_env_node) {
        auto& state = self->state;
        ++state.counters.handled;
        const std::string key = "env " + name;
        register_remote(self, state.remote_envs, key, env);
        self->send(env, atoms::train_step_atom_v, state.steps);
        if (!from_env_node) return;
        state.env_node_envs.insert(key);
        for (auto& [rollout, assigned] : state.env_of_rollout) {
          if (assigned.empty()) assign_env_node_env(self, rollout);
        }
      },
  };
}

caf::actor spawn_coordinator(caf::actor_system& system, CoordinatorConfig config) {
  return system.spawn(coordinator_actor, std::move(config));
}

}  // namespace sao::actors
