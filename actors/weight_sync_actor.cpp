// Weight-sync behaviour; see weight_sync_actor.hpp.
#include "actors/weight_sync_actor.hpp"

#include "actors/introspection.hpp"

#include "gpu/transport.hpp"
#include "net/bulk_transfer.hpp"

#include <cstdio>
#include <deque>
#include <map>
#include <set>

namespace sao::actors {

struct WeightSyncState {
  // The latest weights as a ready message: CAF shares one copy between every
  // rollout it is sent to (copy-on-write), so a push costs no tensor copies.
  caf::message latest;
  int64_t latest_version = -1;
  // The other forms of `latest` when that holds device weights, each made
  // on the first push that needs it and shared by every such push of the
  // version: host bytes, and a CUDA IPC handle to the device buffer.
  caf::message latest_host;
  caf::message latest_ipc;
  // The bulk-channel notice for `latest` (made, and its bytes published on
  // the bulk server, on the first push to another process), and the rollouts
  // whose read from the bulk server failed (they get bytes through CAF).
  std::shared_ptr<net::BulkServer> bulk_server;
  caf::message latest_bulk;
  std::set<std::string> bulk_failed;
  // The GPU of the latest device buffer ("" on the CPU), and where each
  // rollout runs (by name): together they choose the transport.
  std::string learner_gpu_uuid;
  std::map<std::string, msg::RolloutPlacement> placement;
  // A CUDA IPC push keeps the device buffer it points into alive until the
  // rollout acknowledges it (a newer version may replace `latest` before).
  std::map<std::string, caf::message> ipc_in_flight;
  std::map<std::string, int64_t> pushes_by_transport;
  std::map<std::string, std::string> transport_of;  // rollout name -> the form its last push took
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
  ActorCounters counters;
  static inline const char* name = "weight-sync";
};

namespace {
using WeightSyncSelf = WeightSyncActor::stateful_pointer<WeightSyncState>;

// The notice a rollout in another process gets instead of the bytes; the
// first call per version publishes the host bytes on the bulk server (the
// server keeps the message, and so the bytes, alive while it serves them).
const caf::message* bulk_notice(WeightSyncSelf self) {
  auto& state = self->state;
  if (state.latest_bulk.empty()) {
    const caf::message& source = state.latest_host.empty() ? state.latest : state.latest_host;
    const auto& weights = source.get_as<msg::PolicyWeights>(0);
    auto owner = std::make_shared<caf::message>(source);
    state.bulk_server->publish(weights.version, weights.tensors.bytes.data(), weights.tensors.bytes.size(), owner);
    msg::PolicyWeights notice;
    notice.version = weights.version;
    notice.tensors.index = weights.tensors.index;
    notice.bulk_port = state.bulk_server->port();
    notice.bulk_bytes = weights.tensors.bytes.size();
    state.latest_bulk = caf::make_message(std::move(notice));
  }
  return &state.latest_bulk;
}

void push_latest(WeightSyncSelf self, const std::string& rollout) {
  auto& state = self->state;
  if (state.latest_version < 0 || state.awaiting_ack[rollout]) return;
  if (state.running_version[rollout] >= state.latest_version) return;
  // The prepared message is shared by every push (no tensor copies); a
  // typed send would take the struct by value, so it goes out untyped - it
  // is a msg::PolicyWeights, which RolloutActor accepts.
  const auto& target = state.rollouts[rollout];
  const auto& latest = state.latest.get_as<msg::PolicyWeights>(0);
  const bool same_process = target.node() == self->node();
  const auto transport = gpu::choose_transport(latest.on_device != nullptr, same_process, state.learner_gpu_uuid,
                                               state.placement[rollout].gpu_uuid, gpu::cuda_transports_built());
  const caf::message* message = &state.latest;
  if (transport == gpu::WeightTransport::kCudaIpc) {
    try {
      if (state.latest_ipc.empty()) {
        msg::PolicyWeights handle;
        handle.version = latest.version;
        handle.tensors.index = latest.on_device->index;
        handle.ipc_handle = gpu::export_ipc(*latest.on_device);
        state.latest_ipc = caf::make_message(std::move(handle));
      }
      state.ipc_in_flight[rollout] = state.latest;  // holds the buffer until the ack
      message = &state.latest_ipc;
    } catch (const std::exception& error) {
      // A buffer CUDA cannot share still reaches the rollout, as host bytes.
      state.counters.last_error = std::string("CUDA IPC export failed, sending host bytes: ") + error.what();
      message = nullptr;
    }
  }
  if (message == nullptr || (transport == gpu::WeightTransport::kHostBytes && latest.on_device)) {
    if (state.latest_host.empty()) {
      state.latest_host =
          caf::make_message(msg::PolicyWeights{latest.version, model::download(*latest.on_device), {}, {}, 0, 0});
    }
    message = &state.latest_host;
  }
  if (message == &state.latest || message == &state.latest_host) {
    if (!same_process && state.bulk_server && state.bulk_failed.count(rollout) == 0) message = bulk_notice(self);
  }
  const std::string used = message == &state.latest_host   ? "host_bytes"
                           : message == &state.latest_bulk ? "bulk_channel"
                                                           : gpu::transport_name(transport);
  ++state.pushes_by_transport[used];
  if (state.transport_of[rollout] != used) {
    // Said once per rollout and change: which path the weights take is the
    // first question when a GPU run is slow.
    std::fprintf(stderr, "weight-sync: %s (%s) receives weights by %s\n", rollout.c_str(),
                 state.placement[rollout].device.c_str(), used.c_str());
    state.transport_of[rollout] = used;
  }
  caf::anon_send(caf::actor_cast<caf::actor>(target), *message);
  state.awaiting_ack[rollout] = true;
  ++state.pushes;
}
}  // namespace

WeightSyncActor::behavior_type weight_sync_behavior(WeightSyncSelf self, int64_t delay_versions,
                                                    std::shared_ptr<net::BulkServer> bulk_server) {
  self->state.delay_versions = delay_versions;
  self->state.bulk_server = std::move(bulk_server);
  self->set_down_handler([self](const caf::down_msg& down) {
    auto& state = self->state;
    for (auto it = state.rollouts.begin(); it != state.rollouts.end(); ++it) {
      if (it->second.address() == down.source) {
        state.running_version.erase(it->first);
        state.awaiting_ack.erase(it->first);
        state.placement.erase(it->first);
        state.transport_of.erase(it->first);
        state.ipc_in_flight.erase(it->first);
        state.bulk_failed.erase(it->first);
        state.rollouts.erase(it);
        return;
      }
    }
  });
  return {
      [self](msg::PolicyWeights& weights) {
        auto& state = self->state;
        ++state.counters.handled;
        if (weights.version <= state.received_version) return;
        state.received_version = weights.version;
        state.held.push_back(caf::make_message(std::move(weights)));
        const auto version_of = [](const caf::message& m) { return m.get_as<msg::PolicyWeights>(0).version; };
        // The newest held version old enough; the oldest while none is (the
        // first versions of a run have nothing older to stand in for them).
        size_t pick = 0;
        for (size_t i = 0; i < state.held.size(); ++i) {
          if (version_of(state.held[i]) <= state.received_version - state.delay_versions) pick = i;
        }
        auto chosen = state.held[pick];
        state.held.erase(state.held.begin(), state.held.begin() + static_cast<std::ptrdiff_t>(pick));
        const int64_t version = version_of(chosen);
        if (version <= state.latest_version) return;
        state.latest_version = version;
        const auto& chosen_weights = chosen.get_as<msg::PolicyWeights>(0);
        if (chosen_weights.on_device && state.learner_gpu_uuid.empty()) {
          state.learner_gpu_uuid = gpu::gpu_uuid_of(chosen_weights.on_device->buffer.device());
        }
        state.latest = std::move(chosen);
        state.latest_host = caf::message{};
        state.latest_ipc = caf::message{};
        state.latest_bulk = caf::message{};
        for (const auto& item : state.rollouts) push_latest(self, item.first);
      },
      [self](atoms::register_atom, const std::string& name, const RolloutActor& rollout,
             const msg::RolloutPlacement& placement) {
        auto& state = self->state;
        ++state.counters.handled;
        state.rollouts[name] = rollout;
        state.placement[name] = placement;
        state.ipc_in_flight.erase(name);
        state.bulk_failed.erase(name);  // a restarted rollout tries the bulk channel again
        state.running_version[name] = -1;
        state.awaiting_ack[name] = false;
        self->monitor(rollout);
        push_latest(self, name);
      },
      [self](const msg::VersionAck& ack) {
        auto& state = self->state;
        ++state.counters.handled;
        if (state.rollouts.count(ack.rollout) == 0) return;  // from a rollout that has gone
        if (!ack.bulk_error.empty() && state.bulk_failed.insert(ack.rollout).second) {
          // Said once per rollout: its weights now travel in CAF messages.
          state.counters.last_error = ack.bulk_error;
          std::fprintf(stderr, "weight-sync: %s could not read from the bulk channel (%s); sending it host bytes\n",
                       ack.rollout.c_str(), ack.bulk_error.c_str());
        }
        state.running_version[ack.rollout] = ack.version;
        state.awaiting_ack[ack.rollout] = false;
        state.ipc_in_flight.erase(ack.rollout);
        push_latest(self, ack.rollout);
      },
      [self](atoms::versions_atom) {
        ++self->state.counters.handled;
        // Numbers are exactly rollout name -> version (no status numbers mixed in).
        msg::ActorStatus status;
        status.name = "weight-sync";
        status.kind = "weight_sync";
        status.state = "idle";
        for (const auto& item : self->state.running_version) status.numbers[item.first] = item.second;
        return status;
      },
      [self](atoms::status_atom) {
        auto& state = self->state;
        ++state.counters.handled;
        // "syncing" while some rollout still runs an older version than the latest.
        bool behind = false;
        for (const auto& item : state.running_version) behind = behind || item.second < state.latest_version;
        auto status =
            describe_actor(self, "weight-sync", "weight_sync", behind ? "syncing" : "idle", state.counters, {});
        status.numbers["latest_version"] = static_cast<double>(state.latest_version);
        status.numbers["received_version"] = static_cast<double>(state.received_version);
        status.numbers["delay_versions"] = static_cast<double>(state.delay_versions);
        status.numbers["rollouts"] = static_cast<double>(state.rollouts.size());
        status.numbers["pushes"] = static_cast<double>(state.pushes);
        if (state.bulk_server) {
          const auto bulk = state.bulk_server->stats();
          status.numbers["bulk_port"] = state.bulk_server->port();
          status.numbers["bulk_served"] = static_cast<double>(bulk.served);
          status.numbers["bulk_not_held"] = static_cast<double>(bulk.not_held);
          status.numbers["bulk_refused"] = static_cast<double>(bulk.refused);
          status.numbers["bulk_bytes_sent"] = static_cast<double>(bulk.bytes_sent);
          status.numbers["bulk_failed_rollouts"] = static_cast<double>(state.bulk_failed.size());
        }
        for (const auto& item : state.pushes_by_transport) {
          status.numbers["pushes_" + item.first] = static_cast<double>(item.second);
        }
        for (const auto& item : state.running_version) status.numbers["version." + item.first] = item.second;
        return status;
      },
  };
}

WeightSyncActor spawn_weight_sync_actor(caf::actor_system& system, int64_t delay_versions,
                                        std::shared_ptr<net::BulkServer> bulk_server) {
  return system.spawn(weight_sync_behavior, delay_versions, std::move(bulk_server));
}

}  // namespace sao::actors
