// Learner actor: runs one algo::Learner step per batch from replay, then
// publishes the new weights to weight-sync and tells replay it is idle
// again. Also runs held-out evaluation and checkpoints between steps.
// Detached: a step blocks its thread for the length of the maths.
#pragma once

#include "actors/protocol.hpp"
#include "algo/rank_group.hpp"
#include "config/run_config.hpp"
#include "model/transformer.hpp"

#include <memory>
#include <string>

namespace sao::actors {

struct LearnerActorConfig {
  config::RunConfig run;
  model::CausalLM policy{nullptr};  // the warm-start policy; the learner owns it from here on
  std::string resume_from;          // learner checkpoint dir to continue from ("" = fresh)
  // learner.ranks > 1: the group this learner leads as rank 0
  // (join_learner_ranks); null: one rank.
  std::shared_ptr<algo::RankGroup> ranks;
};

// learner.ranks > 1: opens rank 0's rendezvous at learner.rank_address,
// waits up to learner.rank_timeout_s for ranks 1..N-1 (`sao node --role
// learner-rank`) and sends them the model's and the learner's config.
// Returns null for one rank; throws algo::RankFailure when the ranks do not
// come. Called before the actors start, so a missing rank costs no warm-up.
std::shared_ptr<algo::RankGroup> join_learner_ranks(const config::RunConfig& run, const model::ModelConfig& model);

// Spawns the actor (state and behaviour are private to the .cpp).
LearnerActor spawn_learner_actor(caf::actor_system& system, LearnerActorConfig config);

}  // namespace sao::actors
