// Weight-sync behaviour; see weight_sync_actor.hpp.
#include "actors/weight_sync_actor.hpp"

#include "actors/introspection.hpp"

#include <map>

namespace sao::actors {

struct WeightSyncState {
  // The latest weights as a ready message: CAF shares one copy between every
  // rollout it is sent to (copy-on-write), so a push costs no tensor copies.
  caf::message latest;
  int64_t latest_version = -1;
  std::map<std::string, RolloutActor> rollouts;
  std::map<std::string, int64_t> running_version;  // rollout name -> version it acknowledged
  // At most one push per rollout is unacknowledged: a rollout across a slow
  // link (or a model that takes longer to send than to train a step) gets the
  // latest version when it has taken the previous one, instead of a queue of
  // versions it would only skip through, growing in the sender's buffers.
  std::map<std::string, bool> awaiting_ack;
  int64_t pushes = 0;
  ActorCounters counters;
  static inline const char* name = "weight-sync";
};

namespace {
using Self = WeightSyncActor::stateful_pointer<WeightSyncState>;

void push_latest(Self self, const std::string& rollout) {
  auto& state = self->state;
  if (state.latest_version < 0 || state.awaiting_ack[rollout]) return;
  if (state.running_version[rollout] >= state.latest_version) return;
  // The prepared message is shared by every push (no tensor copies); a
  // typed send would take the struct by value, so it goes out untyped - it
  // is a msg::PolicyWeights, which RolloutActor accepts.
  caf::anon_send(caf::actor_cast<caf::actor>(state.rollouts[rollout]), state.latest);
  state.awaiting_ack[rollout] = true;
  ++state.pushes;
}
}  // namespace

WeightSyncActor::behavior_type weight_sync_behavior(Self self) {
  self->set_down_handler([self](const caf::down_msg& down) {
    auto& state = self->state;
    for (auto it = state.rollouts.begin(); it != state.rollouts.end(); ++it) {
      if (it->second.address() == down.source) {
        state.running_version.erase(it->first);
        state.awaiting_ack.erase(it->first);
        state.rollouts.erase(it);
        return;
      }
    }
  });
  return {
      [self](msg::PolicyWeights& weights) {
        auto& state = self->state;
        ++state.counters.handled;
        if (weights.version <= state.latest_version) return;
        state.latest_version = weights.version;
        state.latest = caf::make_message(std::move(weights));
        for (const auto& item : state.rollouts) push_latest(self, item.first);
      },
      [self](atoms::register_atom, const std::string& name, const RolloutActor& rollout) {
        auto& state = self->state;
        ++state.counters.handled;
        state.rollouts[name] = rollout;
        state.running_version[name] = -1;
        state.awaiting_ack[name] = false;
        self->monitor(rollout);
        push_latest(self, name);
      },
      [self](const msg::VersionAck& ack) {
        auto& state = self->state;
        ++state.counters.handled;
        if (state.rollouts.count(ack.rollout) == 0) return;  // from a rollout that has gone
        state.running_version[ack.rollout] = ack.version;
        state.awaiting_ack[ack.rollout] = false;
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
        status.numbers["rollouts"] = static_cast<double>(state.rollouts.size());
        status.numbers["pushes"] = static_cast<double>(state.pushes);
        for (const auto& item : state.running_version) status.numbers["version." + item.first] = item.second;
        return status;
      },
  };
}

WeightSyncActor spawn_weight_sync_actor(caf::actor_system& system) {
  return system.spawn(weight_sync_behavior);
}

}  // namespace sao::actors
