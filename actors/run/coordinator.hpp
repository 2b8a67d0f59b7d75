// Coordinator: spawns every actor of a run from the config, wires them,
// monitors env and rollout actors and restarts the ones that fail, ends the
// run at its step budget (or on request) with a final evaluation and
// checkpoint, and shuts every actor down before reporting RunFinished.
#pragma once

#include "actors/protocol.hpp"
#include "algo/rank_group.hpp"
#include "config/run_config.hpp"
#include "model/transformer.hpp"

#include <memory>
#include <string>

namespace sao::net {
class BulkServer;
}

namespace sao::actors {

struct CoordinatorConfig {
  config::RunConfig run;
  model::CausalLM policy{nullptr};
  std::string resume_from;
  caf::actor reply_to;  // receives msg::RunFinished
  // Rollout actors spawned in this process; -1: run.rollout.num_actors. A
  // cluster learner runs 0 and gets its rollouts from nodes that join.
  int64_t local_rollouts = -1;
  // A cluster learner's bulk channel for weights (null: weights travel in
  // CAF messages only); handed to the weight-sync actor.
  std::shared_ptr<net::BulkServer> bulk_server = nullptr;
  // learner.ranks > 1: the group the learner leads (join_learner_ranks).
  std::shared_ptr<algo::RankGroup> learner_ranks = nullptr;
  // agent.endpoint: the agent actor (actors/agent/) is every local
  // rollout's env instead of env actors. It holds the agents' sessions, so
  // it is never restarted: if it fails, the run ends.
  EnvActor agent_endpoint;
};

// Spawns the actor (state and behaviour are private to the .cpp).
CoordinatorActor spawn_coordinator(caf::actor_system& system, CoordinatorConfig config);

}  // namespace sao::actors
