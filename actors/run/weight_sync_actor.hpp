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
//
// With a bulk server (a cluster learner's, net/bulk_transfer.hpp), a rollout
// in another process is sent a notice (version, index, port and size) and
// reads the bytes from that server; the version's buffer is published there
// once, on the first such push. A rollout whose read fails says so in its
// ack and is sent the bytes in CAF messages from then on.
#pragma once

#include "actors/protocol.hpp"

#include <memory>

namespace sao::net {
class BulkServer;
}

namespace sao::actors {

// Spawns the actor (state and behaviour are private to the .cpp).
WeightSyncActor spawn_weight_sync_actor(caf::actor_system& system, int64_t delay_versions = 0,
                                        std::shared_ptr<net::BulkServer> bulk_server = nullptr);

}  // namespace sao::actors
