// Weight-sync actor: holds the latest policy weights, pushes every new
// version to all registered rollout actors (and to a newly registered or
// restarted one at once), and knows which version each of them runs.
#pragma once

#include "actors/messages.hpp"

namespace sao::actors {

// Spawns the actor (state and behaviour are private to the .cpp).
caf::actor spawn_weight_sync_actor(caf::actor_system& system);

}  // namespace sao::actors
