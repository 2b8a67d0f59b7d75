// Replay actor behaviour; see replay_actor.hpp.
#include "actors/run/replay_actor.hpp"

#include "actors/introspection.hpp"
#include "base/error.hpp"
#include "config/live_knobs.hpp"

#include <map>
#include <memory>

namespace sao::actors {

struct ReplayActorState {
  std::unique_ptr<replay::ReplayBuffer> buffer;
  LearnerActor learner;
  bool learner_idle = false;
  int64_t learner_version = 0;
  int64_t dropped_reported = 0;
  ActorCounters counters;
  std::map<std::string, int64_t> received_from;  // rollout name -> trajectories (which nodes contribute)
  static inline const char* name = "replay";
};

namespace {
using ReplaySelf = ReplayActor::stateful_pointer<ReplayActorState>;

void try_dispatch(ReplaySelf self) {
  auto& state = self->state;
  if (!state.learner_idle) return;
  msg::TrainBatch batch;
  batch.trajectories = state.buffer->take_batch(state.learner_version);
  if (batch.trajectories.empty()) return;
  batch.dropped_stale = state.buffer->stats().dropped_stale - state.dropped_reported;
  state.dropped_reported = state.buffer->stats().dropped_stale;
  batch.queued_after = state.buffer->queued();
  state.learner_idle = false;
  self->send(state.learner, std::move(batch));
}
msg::ReplayAck answer(const ReplayActorState& state, bool accepted) {
  const auto& buffer = *state.buffer;
  return msg::ReplayAck{accepted, buffer.queued(), buffer.full(), buffer.room(), !buffer.ready(state.learner_version)};
}
}  // namespace

ReplayActor::behavior_type replay_behavior(ReplaySelf self, replay::ReplayConfig config, LearnerActor learner) {
  self->state.buffer = std::make_unique<replay::ReplayBuffer>(config);
  self->state.learner = std::move(learner);
  return counted_behavior<ReplayActor::behavior_type>(
      self,
      [self](algo::Trajectory& trajectory) {
        auto& state = self->state;
        ++state.received_from[trajectory.origin.rollout];
        const bool accepted = state.buffer->add(std::move(trajectory), state.learner_version);
        try_dispatch(self);
        return answer(state, accepted);
      },
      [self](atoms::room_atom) {
        auto& state = self->state;
        return answer(state, false);
      },
      [self](atoms::learner_idle_atom, int64_t policy_version) {
        self->state.learner_idle = true;
        self->state.learner_version = policy_version;
        try_dispatch(self);
      },
      [self](const msg::SetKnob& change) -> caf::result<std::string> {
        auto& state = self->state;
        try {
          // A peer's knob number is checked before its name is used.
          if (!config::knob_from_value(static_cast<uint8_t>(change.knob))) throw Error("set: unknown live knob");
          config::apply_knob(state.buffer->config(), config::KnobChange{change.knob, change.value});
        } catch (const Error& error) {
          state.counters.last_error = error.what();
          return msg::make_error(msg::Errc::kRefused, error.what());
        }
        try_dispatch(self);  // a smaller min_batch may release a batch now
        return std::string("replay.") + config::knob_name(change.knob) + " applied";
      },
      [self](atoms::status_atom) {
        auto& state = self->state;
        const auto& stats = state.buffer->stats();
        const auto& knobs = state.buffer->config();
        auto status = describe_actor(self, "replay", "replay",
                                     state.learner_idle ? "waiting_for_batch" : "learner_busy", state.counters, {});
        status.numbers.insert({{"queued", static_cast<double>(state.buffer->queued())},
                               {"pending_partial_groups", static_cast<double>(state.buffer->pending_partial())},
                               {"full", state.buffer->full() ? 1.0 : 0.0},
                               {"received", static_cast<double>(stats.received)},
                               {"dropped_stale", static_cast<double>(stats.dropped_stale)},
                               {"handed_out", static_cast<double>(stats.handed_out)},
                               {"learner_version", static_cast<double>(state.learner_version)},
                               {"capacity", static_cast<double>(knobs.capacity)}});
        for (const auto& spec : config::knob_table()) {
          if (spec.owner == config::KnobOwner::kReplay) {
            status.numbers[spec.name] = config::replay_knob_value(knobs, spec.knob);
          }
        }
        for (const auto& [staleness, count] : stats.staleness_histogram) {
          status.numbers["staleness." + std::to_string(staleness)] = static_cast<double>(count);
        }
        for (const auto& [rollout, count] : state.received_from) {
          status.numbers["from." + rollout] = static_cast<double>(count);
        }
        return status;
      });
}

ReplayActor spawn_replay_actor(caf::actor_system& system, replay::ReplayConfig config, LearnerActor learner) {
  return system.spawn(replay_behavior, config, std::move(learner));
}

}  // namespace sao::actors
