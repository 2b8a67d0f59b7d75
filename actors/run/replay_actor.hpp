// Replay actor: a thin shell over replay::ReplayBuffer. Hands the learner a
// batch the moment the learner is idle and the batch policy says ready, so
// every finished rollout can trigger a step without the learner polling.
#pragma once

#include "actors/protocol.hpp"
#include "replay/replay_buffer.hpp"

namespace sao::actors {

// Spawns the actor (state and behaviour are private to the .cpp).
ReplayActor spawn_replay_actor(caf::actor_system& system, replay::ReplayConfig config, LearnerActor learner);

}  // namespace sao::actors
