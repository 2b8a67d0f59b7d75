// The coordinator's state and the parts of it that live in two files:
// coordinator.cpp (lifecycle, supervision, operator control) and
// coordinator_cluster.cpp (cluster membership: remote actors joining and
// leaving, env nodes' envs given to rollouts). Internal to those two files.
#pragma once

#include "actors/console/introspection_actor.hpp"
#include "actors/introspection.hpp"
#include "actors/protocol.hpp"
#include "actors/run/coordinator.hpp"
#include "actors/run/env_actor.hpp"
#include "actors/run/learner_actor.hpp"
#include "actors/run/metrics_actor.hpp"
#include "actors/run/replay_actor.hpp"
#include "actors/run/rollout_actor.hpp"
#include "actors/run/weight_sync_actor.hpp"
#include "actors/supervision.hpp"

#include <caf/all.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace sao::actors {

struct CoordinatorState {
  CoordinatorConfig config;
  MetricsActor metrics;
  WeightSyncActor weight_sync;
  LearnerActor learner;
  ReplayActor replay;
  IntrospectionActor introspection;
  std::vector<EnvActor> envs;
  std::vector<std::chrono::steady_clock::time_point> env_started;
  std::vector<RolloutActor> rollouts;
  std::vector<RolloutActorConfig> rollout_configs;
  // Actors of cluster nodes (actors/cluster/cluster.hpp): monitored, never restarted
  // here (their node rejoins), and told about pauses and the end of the run.
  std::map<std::string, RolloutActor> remote_rollouts;
  std::map<std::string, EnvActor> remote_envs;  // every remote env hears the learner's step
  // Env nodes' envs serve the rollouts that have none of their own:
  // rollout -> the env it was given ("" while there is none).
  std::set<std::string> env_node_envs;
  std::map<std::string, std::string> env_of_rollout;
  int64_t remote_rollouts_lost = 0;
  bool stopping = false;
  // Local env actors told to exit (replaced after a failure, or at the end)
  // that have not yet: an env actor blocked in a call to its environment
  // exits when that call returns (within the environment's own deadlines).
  // The run is reported finished only when none is left, so no actor of it
  // is still running at exit.
  std::set<caf::actor_addr> envs_exiting;
  std::unique_ptr<msg::RunFinished> finished_pending;  // sent when envs_exiting empties
  std::string end_detail;  // why the run ended when the reason alone does not say (supervision)
  // Supervision (train.max_actor_failures in train.failure_window_s).
  std::unique_ptr<RestartBudget> restart_budget;
  int64_t lost_in_a_row = 0;  // episodes lost since the last learner step
  std::string first_lost;     // the first of them, for the message
  bool rollouts_paused = false;
  ActorCounters counters;
  int64_t steps = 0;
  int64_t resume_step = 0;  // the checkpoint's learner step when resuming, else 0
  int64_t policy_version = 0;
  int64_t episodes_lost = 0;
  int64_t env_restarts = 0;
  int64_t rollout_restarts = 0;
  static inline const char* name = "coordinator";
};

using CoordinatorSelf = CoordinatorActor::stateful_pointer<CoordinatorState>;

// Local and remote rollout actors.
std::vector<RolloutActor> all_rollouts(const CoordinatorState& state);

// Cluster membership (coordinator_cluster.cpp): what the coordinator's
// join handlers do.
// A cluster node's actor ended: true if it was one (then handled).
bool on_remote_down(CoordinatorSelf self, const caf::down_msg& down, const std::string& why);
// Membership numbers for the gatekeeper's status file.
msg::ActorStatus cluster_status(CoordinatorSelf self);
// The process whose actors use a node name now (none: a default node_id).
caf::node_id node_using_name(CoordinatorSelf self, const std::string& node_name);
// needs_env: the rollout's node has no envs; an env node's env serves it.
void rollout_joined(CoordinatorSelf self, const std::string& name, const RolloutActor& rollout, bool needs_env);
// from_env_node: an env node's env, shared by rollouts that need one.
void env_joined(CoordinatorSelf self, const std::string& name, const EnvActor& env, bool from_env_node);

}  // namespace sao::actors
