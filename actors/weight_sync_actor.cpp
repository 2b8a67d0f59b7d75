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
  std::map<std::string, caf::actor> rollouts;
  std::map<std::string, int64_t> running_version;  // rollout name -> version it acknowledged
  int64_t pushes = 0;
  ActorCounters counters;
  static inline const char* name = "weight-sync";
};

caf::behavior weight_sync_actor(caf::stateful_actor<WeightSyncState>* self) {
  self->set_down_handler([self](const caf::down_msg& down) {
    auto& state = self->state;
    for (auto it = state.rollouts.begin(); it != state.rollouts.end(); ++it) {
      if (it->second.address() == down.source) {
        state.running_version.erase(it->first);
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
        for (const auto& item : state.rollouts) {
          self->send(item.second, state.latest);
          ++state.pushes;
        }
      },
      [self](atoms::register_atom, const std::string& name, const caf::actor& rollout) {
        auto& state = self->state;
        ++state.counters.handled;
        state.rollouts[name] = rollout;
        state.running_version[name] = -1;
        self->monitor(rollout);
        if (state.latest_version >= 0) {
          self->send(rollout, state.latest);
          ++state.pushes;
        }
      },
      [self](const msg::VersionAck& ack) {
        ++self->state.counters.handled;
        self->state.running_version[ack.rollout] = ack.version;
      },
      [self](atoms::versions_atom) {
        ++self->state.counters.handled;
        auto status = describe_actor(self, "weight-sync", "weight_sync", "idle", self->state.counters, {});
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

caf::actor spawn_weight_sync_actor(caf::actor_system& system) {
  return system.spawn(weight_sync_actor);
}

}  // namespace sao::actors
