// Introspection actor behaviour; see introspection_actor.hpp.
#include "actors/console/introspection_actor.hpp"

#include "actors/console/activity_board.hpp"
#include "actors/introspection.hpp"
#include "report/system_info.hpp"

#include <unistd.h>

#include <memory>

namespace sao::actors {

struct IntrospectionState {
  CoordinatorActor coordinator;
  ActorCounters counters;
  int64_t snapshots = 0;
  static inline const char* name = "introspection";
};

void add_learner_ranks(std::vector<msg::ActorStatus>& statuses) {
  std::vector<msg::ActorStatus> ranks;
  for (const auto& status : statuses) {
    const auto count = status.numbers.find("ranks");
    if (status.kind != "learner" || count == status.numbers.end()) continue;
    for (int r = 1; r < static_cast<int>(count->second); ++r) {
      msg::ActorStatus rank;
      rank.name = "learner-rank-" + std::to_string(r);
      rank.kind = "learner-rank";
      rank.state = status.state;
      rank.node = "rank " + std::to_string(r) + " of " + std::to_string(static_cast<int>(count->second)) +
                  " (follows " + status.name + " over c10d)";
      rank.numbers["rank"] = r;
      const std::string prefix = "rank" + std::to_string(r);
      for (const char* field : {"_tokens", "_compute_s", "_allreduce_s"}) {
        auto it = status.numbers.find(prefix + field);
        if (it != status.numbers.end()) rank.numbers[std::string(field).substr(1)] = it->second;
      }
      ranks.push_back(std::move(rank));
    }
  }
  for (auto& rank : ranks) statuses.push_back(std::move(rank));
}

namespace {
using IntrospectionSelf = IntrospectionActor::stateful_pointer<IntrospectionState>;

// CAF names nodes only once the network layer is up; a purely local run's
// actors are named by host and process instead.
std::string node_name(const caf::node_id& node) {
  if (node != caf::node_id{}) return caf::to_string(node);
  return report::host_process_name();
}

using SnapshotPromise = caf::typed_response_promise<std::vector<msg::ActorStatus>>;

// One snapshot in progress: replies arrive in any order, each in its slot.
struct Gathering {
  std::vector<msg::ActorStatus> statuses;
  size_t pending = 0;
  SnapshotPromise promise;
};

void gather(IntrospectionSelf self, const std::vector<StatusActor>& actors, const std::vector<std::string>& names,
            SnapshotPromise promise) {
  auto gathering = std::make_shared<Gathering>();
  gathering->statuses.resize(actors.size());
  gathering->pending = actors.size();
  gathering->promise = std::move(promise);
  if (actors.empty()) {
    gathering->promise.deliver(gathering->statuses);
    return;
  }
  for (size_t i = 0; i < actors.size(); ++i) {
    auto finish_one = [gathering, i, actor = actors[i]](msg::ActorStatus status) {
      status.node = node_name(actor.node());
      status.actor_id = actor.id();
      gathering->statuses[i] = std::move(status);
      if (--gathering->pending == 0) {
        add_learner_ranks(gathering->statuses);
        gathering->promise.deliver(gathering->statuses);
      }
    };
    const std::string name = i < names.size() ? names[i] : "actor-" + std::to_string(actors[i].id());
    // A busy actor reads its mailbox only after its job: answer from the
    // board at once instead of waiting out the timeout.
    const auto address = caf::actor_cast<caf::actor_addr>(actors[i]);
    if (auto activity = current_activity(address)) {
      finish_one(busy_status(*activity));
      continue;
    }
    self->request(actors[i], kStatusTimeout, atoms::status_atom_v)
        .then([finish_one](msg::ActorStatus& status) { finish_one(std::move(status)); },
              [self, finish_one, name, address](const caf::error& error) {
                // The job may have begun after the request was sent.
                if (auto activity = current_activity(address)) {
                  finish_one(busy_status(*activity));
                  return;
                }
                msg::ActorStatus status;
                status.name = name;
                status.kind = "unknown";
                status.state = "unresponsive";
                status.last_error = self->system().render(error);
                finish_one(std::move(status));
              });
  }
}
}  // namespace

IntrospectionActor::behavior_type introspection_behavior(IntrospectionSelf self, CoordinatorActor coordinator) {
  self->state.coordinator = std::move(coordinator);
  return counted_behavior<IntrospectionActor::behavior_type>(
      self,
      [self](atoms::snapshot_atom) {
        auto& state = self->state;
        ++state.snapshots;
        auto promise = self->make_response_promise<std::vector<msg::ActorStatus>>();
        self->request(state.coordinator, kStatusTimeout, atoms::actors_atom_v)
            .then([self, promise](const std::vector<StatusActor>& actors,
                                  const std::vector<std::string>& names) { gather(self, actors, names, promise); },
                  [self, promise](const caf::error& error) mutable {
                    self->state.counters.last_error =
                        "coordinator did not list its actors: " + self->system().render(error);
                    promise.deliver(error);
                  });
        return promise;
      },
      [self](atoms::status_atom) {
        auto& state = self->state;
        return describe_actor(self, "introspection", "introspection", "idle", state.counters,
                              {{"snapshots", static_cast<double>(state.snapshots)}});
      });
}

IntrospectionActor spawn_introspection_actor(caf::actor_system& system, CoordinatorActor coordinator) {
  return system.spawn(introspection_behavior, std::move(coordinator));
}

}  // namespace sao::actors
