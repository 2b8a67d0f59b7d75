// Cluster membership of the coordinator; see coordinator_state.hpp.
#include "actors/run/coordinator_state.hpp"

#include <cstdio>

namespace sao::actors {

namespace {
// Gives a rollout without envs of its own the env node env that serves the
// fewest rollouts, or none (it then idles) while no env node is connected.
void assign_env_node_env(CoordinatorSelf self, const std::string& rollout) {
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
  if (best.empty()) std::fprintf(stderr, "coordinator: rollout %s waits for an env node\n", rollout.c_str());
  self->send(state.remote_rollouts[rollout], atoms::env_atom_v, best.empty() ? EnvActor{} : state.remote_envs[best]);
}

template <class Handle>
void register_remote(CoordinatorSelf self, std::map<std::string, Handle>& registry, const char* kind,
                     const std::string& name, const Handle& actor) {
  // A node that rejoins under its old name replaces its previous actor.
  auto it = registry.find(name);
  if (it != registry.end()) self->demonitor(it->second.address());
  registry[name] = actor;
  self->monitor(actor);
  std::fprintf(stderr, "coordinator: remote %s %s joined\n", kind, name.c_str());
}

}  // namespace

// A cluster node's actor ended (its node stopped, crashed or disconnected).
// The episodes its rollout had in flight are gone: counted as one batch.
bool on_remote_down(CoordinatorSelf self, const caf::down_msg& down, const std::string& why) {
  auto& state = self->state;
  for (auto it = state.remote_envs.begin(); it != state.remote_envs.end(); ++it) {
    if (it->second.address() != down.source) continue;
    std::fprintf(stderr, "coordinator: remote env %s left (%s)\n", it->first.c_str(), why.c_str());
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
    const int64_t in_flight = state.config.run.rollout.slots;
    std::fprintf(stderr, "coordinator: remote rollout %s left (%s); counting its %lld in-flight episodes as lost\n",
                 it->first.c_str(), why.c_str(), static_cast<long long>(in_flight));
    ++state.remote_rollouts_lost;
    state.episodes_lost += in_flight;
    for (int64_t i = 0; i < in_flight; ++i) {
      self->send(state.metrics, msg::EpisodeLost{it->first, msg::LossCause::kNodeLost, why});
    }
    state.env_of_rollout.erase(it->first);
    state.remote_rollouts.erase(it);
    return true;
  }
  return false;
}

msg::ActorStatus cluster_status(CoordinatorSelf self) {
  const auto& state = self->state;
  return describe_actor(self, "coordinator", "cluster", state.stopping ? "stopping" : "running", state.counters,
                        {{"remote_rollouts", static_cast<double>(state.remote_rollouts.size())},
                         {"remote_rollouts_lost", static_cast<double>(state.remote_rollouts_lost)},
                         {"remote_envs", static_cast<double>(state.remote_envs.size())},
                         {"env_node_envs", static_cast<double>(state.env_node_envs.size())}});
}

// Remote actors are named "NODE/rollout-i" and "NODE/env-i".
caf::node_id node_using_name(CoordinatorSelf self, const std::string& node_name) {
  const std::string prefix = node_name + "/";
  for (const auto& [name, actor] : self->state.remote_rollouts) {
    if (name.rfind(prefix, 0) == 0) return actor.node();
  }
  for (const auto& [name, actor] : self->state.remote_envs) {
    if (name.rfind(prefix, 0) == 0) return actor.node();
  }
  return caf::node_id{};
}

void rollout_joined(CoordinatorSelf self, const std::string& name, const RolloutActor& rollout, bool needs_env) {
  register_remote(self, self->state.remote_rollouts, "rollout", name, rollout);
  if (self->state.stopping || self->state.rollouts_paused) self->send(rollout, atoms::pause_atom_v);
  if (needs_env) assign_env_node_env(self, name);
}

void env_joined(CoordinatorSelf self, const std::string& name, const EnvActor& env, bool from_env_node) {
  auto& state = self->state;
  register_remote(self, state.remote_envs, "env", name, env);
  self->send(env, atoms::train_step_atom_v, state.steps);
  if (!from_env_node) return;
  state.env_node_envs.insert(name);
  for (auto& [rollout, assigned] : state.env_of_rollout) {
    if (assigned.empty()) assign_env_node_env(self, rollout);
  }
}

}  // namespace sao::actors
