// Weight-sync actor: holds the latest policy weights, pushes new versions to
// all registered rollout actors (and to a newly registered or restarted one
// at once), and knows which version each of them runs. A rollout has at most
// one push in flight: when it acknowledges a version it gets the latest, so a
// slow receiver skips versions instead of queueing them.
//
// delay_versions > 0 is a staleness stress for experiments (the config key
// rollout.weight_delay_versions): rollouts are sent the newest version at
// least that many versions older than the learner's newest, so every episode
// is sampled from a policy at least that stale.
#pragma once

#include "actors/protocol.hpp"

namespace sao::actors {

// Spawns the actor (state and behaviour are private to the .cpp).
WeightSyncActor spawn_weight_sync_actor(caf::actor_system& system, int64_t delay_versions = 0);

}  // namespace sao::actors
