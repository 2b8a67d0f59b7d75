// Weight-sync behaviour; see weight_sync_actor.hpp.
#include "actors/run/weight_sync_actor.hpp"

#include "actors/introspection.hpp"

#include "net/bulk_transfer.hpp"
#include "weights/replica.hpp"
#include "weights/sender.hpp"

#include <cstdio>
#include <deque>
#include <map>
#include <set>
#include <tuple>

namespace sao::actors {

// One version's messages: the learner's packet as a ready message (CAF
// shares one copy between every rollout it is sent to, copy-on-write, so a
// push by the packet's own route costs no tensor copies); its bf16 form
// for bf16 replicas, made on the first push to one; and what was made of
// either for other routes (host bytes of a device version, a bulk-channel
// notice, a CUDA IPC handle, a delta from one base), each on the first push
// that needs it and shared by every such push of the version.
struct VersionMessages {
  int64_t version = -1;
  caf::message packet;
  caf::message bf16;
  std::map<std::tuple<bool, weights::Route, int64_t>, caf::message> made;  // (bf16, route, packet key)
};

struct WeightSyncState {
  VersionMessages latest;
  // A LoRA policy's versions after its first carry adapters only; `base` is
  // the newest whole version, sent first to a rollout that has none (a new
  // or restarted one).
  VersionMessages base;
  int64_t base_pushes = 0;
  // Chooses each rollout's route and makes the packets (weights/sender.hpp).
  std::unique_ptr<weights::Sender> sender;
  std::shared_ptr<net::BulkServer> bulk_server;  // for its numbers in status
  std::map<std::string, msg::RolloutPlacement> placement;
  // A route that reads the learner's buffer in place (the device copy, CUDA
  // IPC) keeps that buffer alive until the rollout acknowledges it (a newer
  // version may replace `latest` before).
  std::map<std::string, caf::message> read_in_place;
  std::map<std::string, int64_t> pushes_by_route;
  std::map<std::string, double> bytes_by_route;                 // what the pushes carried, by route
  std::map<std::string, weights::Route> route_of;               // rollout name -> the route of its last push
  std::map<std::string, std::set<weights::Route>> routes_said;  // printed once per rollout and route
  std::map<std::string, RolloutActor> rollouts;
  std::map<std::string, int64_t> running_version;  // rollout name -> version it acknowledged
  // At most one push per rollout is unacknowledged: a rollout across a slow
  // link (or a model that takes longer to send than to train a step) gets the
  // latest version when it has taken the previous one, instead of a queue of
  // versions it would only skip through, growing in the sender's buffers.
  std::map<std::string, bool> awaiting_ack;
  // Staleness stress (rollout.weight_delay_versions): rollouts get the newest
  // version at least `delay_versions` behind the newest the learner sent;
  // `held` keeps the versions not yet old enough, oldest first.
  int64_t delay_versions = 0;
  int64_t received_version = -1;
  std::deque<caf::message> held;
  int64_t pushes = 0;
  int64_t checksums_verified = 0;
  int64_t checksum_mismatches = 0;
  ActorCounters counters;
  static inline const char* name = "weight-sync";
};

namespace {
using WeightSyncSelf = WeightSyncActor::stateful_pointer<WeightSyncState>;

// The bf16 form of a version (weights/replica.hpp), made once. A whole
// version's image also joins the deltas' history while some bf16 replica
// runs in another process (the only receivers deltas go to).
const caf::message& bf16_form(WeightSyncSelf self, VersionMessages& messages) {
  auto& state = self->state;
  if (!messages.bf16.empty()) return messages.bf16;
  report::WorkTimer timer(state.counters.work[report::kWorkWeights]);
  auto packet = weights::bf16_packet(messages.packet.get_as<weights::Packet>(0));
  bool remote_replica = false;
  for (const auto& item : state.placement) {
    remote_replica = remote_replica || (item.second.bf16_replica && state.rollouts[item.first].node() != self->node());
  }
  const auto* newest = state.sender->deltas().newest();
  if (remote_replica && !weights::carries_adapters_only(packet) &&
      (newest == nullptr || newest->version < packet.version)) {
    state.sender->add_replica_version(weights::image_of_packet(packet));
  }
  messages.bf16 = caf::make_message(std::move(packet));
  return messages.bf16;
}

// The message carrying `packet` (the version's packet, or its bf16 form) by
// `route` to a receiver placed so: the packet itself, or one made now (once
// per version, form, route and key). Null when the route cannot carry this
// version (CUDA cannot share the buffer).
const caf::message* message_for(WeightSyncSelf self, VersionMessages& messages, const caf::message& packet,
                                weights::Route route, const weights::Placement& placement) {
  auto& state = self->state;
  const auto& source = packet.get_as<weights::Packet>(0);
  if (route == source.route) return &packet;
  const auto key = std::make_tuple(placement.bf16_replica, route, state.sender->packet_key(route, placement));
  auto made = messages.made.find(key);
  if (made != messages.made.end()) return &made->second;
  try {
    report::WorkTimer timer(state.counters.work[report::kWorkWeights]);
    // The owner keeps the learner's buffers alive while a route serves them
    // (the bulk server holds it until the version is replaced).
    auto owner = std::make_shared<caf::message>(packet);
    made = messages.made.emplace(key, caf::make_message(state.sender->carry(route, source, owner, placement))).first;
    return &made->second;
  } catch (const std::exception& error) {
    state.counters.last_error = std::string(weights::route_name(route)) + " cannot carry v" +
                                std::to_string(source.version) + ": " + error.what();
    return nullptr;
  }
}

// The bytes a push by `packet`'s route carries (a notice: what the bulk
// channel serves; a device route: the buffer read in place).
double pushed_bytes(const weights::Packet& packet) {
  switch (packet.route) {
    case weights::Route::kCafBytes:
      return static_cast<double>(packet.tensors.bytes.size());
    case weights::Route::kBulkChannel:
      return static_cast<double>(packet.bulk_bytes);
    case weights::Route::kBf16Delta:
      return static_cast<double>(packet.delta.wire_bytes());
    case weights::Route::kDeviceCopy:
    case weights::Route::kCudaIpc:
      break;
  }
  double bytes = 0;
  for (const auto& entry : packet.tensors.index) bytes += static_cast<double>(entry.size);
  return bytes;
}

void push_latest(WeightSyncSelf self, const std::string& rollout) {
  auto& state = self->state;
  if (state.latest.version < 0 || state.awaiting_ack[rollout]) return;
  if (state.running_version[rollout] >= state.latest.version) return;
  // A rollout without the frozen base of a LoRA run gets the base first;
  // its acknowledgement brings the latest adapters.
  const bool adapters_only = weights::carries_adapters_only(state.latest.packet.get_as<weights::Packet>(0));
  if (adapters_only && state.base.version < 0) return;  // never: a learner's first version is whole
  const bool needs_base = adapters_only && state.running_version[rollout] < state.base.version;
  auto& messages = needs_base ? state.base : state.latest;
  const auto& target = state.rollouts[rollout];
  weights::Placement placement;
  placement.device = state.placement[rollout].device;
  placement.gpu_uuid = state.placement[rollout].gpu_uuid;
  placement.same_process = target.node() == self->node();
  placement.bf16_replica = state.placement[rollout].bf16_replica;
  placement.version = state.running_version[rollout];
  const caf::message& packet = placement.bf16_replica ? bf16_form(self, messages) : messages.packet;
  const auto& source = packet.get_as<weights::Packet>(0);
  auto route = state.sender->choose(source, rollout, placement);
  // The bulk server keeps the newest versions only, which the base is not.
  if (needs_base && route == weights::Route::kBulkChannel) route = weights::Route::kCafBytes;
  const caf::message* message = message_for(self, messages, packet, route, placement);
  while (message == nullptr) {
    // This rollout takes the next route from now on (CAF bytes always work).
    state.sender->refuse(rollout, route);
    route = state.sender->choose(source, rollout, placement);
    if (needs_base && route == weights::Route::kBulkChannel) route = weights::Route::kCafBytes;
    message = message_for(self, messages, packet, route, placement);
  }
  if (needs_base) ++state.base_pushes;
  if (state.sender->reads_source_in_place(route)) state.read_in_place[rollout] = packet;
  const std::string used = weights::route_name(route);
  ++state.pushes_by_route[used];
  state.bytes_by_route[used] += pushed_bytes(message->get_as<weights::Packet>(0));
  state.route_of[rollout] = route;
  if (state.routes_said[rollout].insert(route).second) {
    // Said once per rollout and route: which path the weights take is the
    // first question when a GPU run is slow (a bf16 replica alternates
    // between deltas and a full version every 32: two lines, not one per
    // anchor).
    std::fprintf(stderr, "weight-sync: %s (%s%s) receives weights by %s\n", rollout.c_str(), placement.device.c_str(),
                 placement.bf16_replica ? ", bf16 replica" : "", used.c_str());
  }
  // The prepared message is shared by every push (no tensor copies); a
  // typed send would take the struct by value, so it goes out untyped - it
  // is a weights::Packet, which RolloutActor accepts.
  caf::anon_send(caf::actor_cast<caf::actor>(target), *message);
  state.awaiting_ack[rollout] = true;
  ++state.pushes;
}

// A rollout's answer to a push: a route it could not use, a checksum that
// did not match.
void note_ack(WeightSyncSelf self, const msg::VersionAck& ack) {
  auto& state = self->state;
  if (!ack.error.empty() && state.sender->refuse(ack.rollout, ack.failed_route)) {
    // Said once per rollout and route.
    state.counters.last_error = ack.error;
    std::fprintf(stderr, "weight-sync: %s could not use %s (%s); it gets the next route\n", ack.rollout.c_str(),
                 weights::route_name(ack.failed_route), ack.error.c_str());
  }
  if (!ack.error.empty()) return;
  if (ack.verified) {
    ++state.checksums_verified;
    return;
  }
  ++state.checksum_mismatches;
  const auto route = state.route_of.count(ack.rollout) > 0 ? state.route_of[ack.rollout] : weights::Route::kCafBytes;
  const bool last_route = route == weights::Route::kCafBytes;
  // By CAF bytes the rollout keeps the version (there is no later route);
  // by any other route it keeps its old one and is sent the version again.
  state.counters.last_error = ack.rollout + ": weights loaded by " + weights::route_name(route) +
                              " did not match the version's checksum (it runs v" + std::to_string(ack.version) + ")";
  std::fprintf(stderr, "weight-sync: %s; %s\n", state.counters.last_error.c_str(),
               last_route ? "no route is left, the mismatch stays counted" : "sending it again by the next route");
  state.sender->refuse(ack.rollout, route);
}
}  // namespace

WeightSyncActor::behavior_type weight_sync_behavior(WeightSyncSelf self, int64_t delay_versions,
                                                    std::shared_ptr<net::BulkServer> bulk_server) {
  self->state.delay_versions = delay_versions;
  self->state.bulk_server = bulk_server;
  self->state.sender = std::make_unique<weights::Sender>(std::move(bulk_server));
  self->set_down_handler([self](const caf::down_msg& down) {
    auto& state = self->state;
    for (auto it = state.rollouts.begin(); it != state.rollouts.end(); ++it) {
      if (it->second.address() == down.source) {
        state.running_version.erase(it->first);
        state.awaiting_ack.erase(it->first);
        state.placement.erase(it->first);
        state.route_of.erase(it->first);
        state.routes_said.erase(it->first);
        state.read_in_place.erase(it->first);
        state.sender->forget(it->first);
        state.rollouts.erase(it);
        return;
      }
    }
  });
  return counted_behavior<WeightSyncActor::behavior_type>(
      self,
      [self](weights::Packet& weights) {
        auto& state = self->state;
        if (weights.version <= state.received_version) return;
        state.received_version = weights.version;
        state.held.push_back(caf::make_message(std::move(weights)));
        const auto version_of = [](const caf::message& m) { return m.get_as<weights::Packet>(0).version; };
        // The newest held version old enough; the oldest while none is (the
        // first versions of a run have nothing older to stand in for them).
        size_t pick = 0;
        for (size_t i = 0; i < state.held.size(); ++i) {
          if (version_of(state.held[i]) <= state.received_version - state.delay_versions) pick = i;
        }
        auto chosen = state.held[pick];
        state.held.erase(state.held.begin(), state.held.begin() + static_cast<std::ptrdiff_t>(pick));
        const int64_t version = version_of(chosen);
        if (version <= state.latest.version) return;
        state.latest = VersionMessages{};
        state.latest.version = version;
        state.latest.packet = std::move(chosen);
        if (!weights::carries_adapters_only(state.latest.packet.get_as<weights::Packet>(0))) state.base = state.latest;
        for (const auto& item : state.rollouts) push_latest(self, item.first);
      },
      [self](atoms::register_atom, const std::string& name, const RolloutActor& rollout,
             const msg::RolloutPlacement& placement) {
        auto& state = self->state;
        state.rollouts[name] = rollout;
        state.placement[name] = placement;
        state.read_in_place.erase(name);
        state.sender->forget(name);  // a restarted rollout tries every route again
        state.running_version[name] = -1;
        state.awaiting_ack[name] = false;
        self->monitor(rollout);
        push_latest(self, name);
      },
      [self](const msg::VersionAck& ack) {
        auto& state = self->state;
        if (state.rollouts.count(ack.rollout) == 0) return;  // from a rollout that has gone
        note_ack(self, ack);
        state.running_version[ack.rollout] = ack.version;
        state.awaiting_ack[ack.rollout] = false;
        state.read_in_place.erase(ack.rollout);
        push_latest(self, ack.rollout);
      },
      [self](atoms::versions_atom) { return msg::RolloutVersions{self->state.running_version}; },
      [self](atoms::status_atom) {
        auto& state = self->state;
        // "syncing" while some rollout still runs an older version than the latest.
        bool behind = false;
        for (const auto& item : state.running_version) behind = behind || item.second < state.latest.version;
        auto status =
            describe_actor(self, "weight-sync", "weight_sync", behind ? "syncing" : "idle", state.counters, {});
        status.numbers["latest_version"] = static_cast<double>(state.latest.version);
        status.numbers["received_version"] = static_cast<double>(state.received_version);
        status.numbers["delay_versions"] = static_cast<double>(state.delay_versions);
        status.numbers["rollouts"] = static_cast<double>(state.rollouts.size());
        status.numbers["pushes"] = static_cast<double>(state.pushes);
        status.numbers["base_pushes"] = static_cast<double>(state.base_pushes);
        status.numbers["base_version"] = static_cast<double>(state.base.version);
        if (state.bulk_server) {
          const auto bulk = state.bulk_server->stats();
          status.numbers["bulk_port"] = state.bulk_server->port();
          status.numbers["bulk_served"] = static_cast<double>(bulk.served);
          status.numbers["bulk_not_held"] = static_cast<double>(bulk.not_held);
          status.numbers["bulk_refused"] = static_cast<double>(bulk.refused);
          status.numbers["bulk_bytes_sent"] = static_cast<double>(bulk.bytes_sent);
        }
        status.numbers["route_refusals"] = static_cast<double>(state.sender->refusals());
        status.numbers["checksums_verified"] = static_cast<double>(state.checksums_verified);
        status.numbers["checksum_mismatches"] = static_cast<double>(state.checksum_mismatches);
        for (const auto& item : state.pushes_by_route) {
          status.numbers["pushes_" + item.first] = static_cast<double>(item.second);
        }
        for (const auto& item : state.bytes_by_route) status.numbers["bytes_" + item.first] = item.second;
        for (const auto& item : state.running_version) status.numbers["version." + item.first] = item.second;
        return status;
      });
}

WeightSyncActor spawn_weight_sync_actor(caf::actor_system& system, int64_t delay_versions,
                                        std::shared_ptr<net::BulkServer> bulk_server) {
  return system.spawn(weight_sync_behavior, delay_versions, std::move(bulk_server));
}

}  // namespace sao::actors
