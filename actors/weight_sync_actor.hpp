// Weight-sync actor: holds the latest policy weights, pushes new versions to
// all registered rollout actors (and to a newly registered or restarted one
// at once), and knows which version each of them runs. A rollout has at most
// one push in flight: when it acknowledges a version it gets the latest, so a
// slow receiver skips versions instead of queueing them.
#pragma once

#include "actors/protocol.hpp"

namespace sao::actors {

// Spawns the actor (state and behaviour are private to the .cpp).
WeightSyncActor spawn_weight_sync_actor(caf::actor_system& system);

}  // namespace sao::actors
