// The coordinator's state and the parts of it that live in two files:
// coordinator.cpp (lifecycle, supervision, operator control) and
// coordinator_cluster.cpp (cluster membership: remote actors joining and
// leaving, env nodes' envs given to rollouts). Internal to those two files.
#pragma once

#include "actors/coordinator.hpp"
#include "actors/introspection.hpp"
#include "actors/messages.hpp"
#include "actors/rollout_actor.hpp"

#include <caf/all.hpp>

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

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

using Self = caf::stateful_actor<CoordinatorState>*;

// Local and remote rollout actors.
std::vector<caf::actor> all_rollouts(const CoordinatorState& state);

// Cluster membership (coordinator_cluster.cpp).
// A cluster node's actor ended: true if it was one (then handled).
bool on_remote_down(Self self, const caf::down_msg& down, const std::string& why);
// The handlers for nodes' join messages; the coordinator's behaviour falls back to them.
caf::message_handler cluster_membership(Self self);

}  // namespace sao::actors
