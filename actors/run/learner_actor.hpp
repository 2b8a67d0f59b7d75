// Learner actor: runs one algo::Learner step per batch from replay, then
// publishes the new weights to weight-sync and tells replay it is idle
// again. Also runs held-out evaluation and checkpoints between steps.
// Detached: a step blocks its thread for the length of the maths.
#pragma once

#include "actors/protocol.hpp"
#include "config/run_config.hpp"
#include "model/transformer.hpp"

#include <string>

namespace sao::actors {

struct LearnerActorConfig {
  config::RunConfig run;
  model::CausalLM policy{nullptr};  // the warm-start policy; the learner owns it from here on
  std::string resume_from;          // learner checkpoint dir to continue from ("" = fresh)
};

// Spawns the actor (state and behaviour are private to the .cpp).
LearnerActor spawn_learner_actor(caf::actor_system& system, LearnerActorConfig config);

}  // namespace sao::actors
