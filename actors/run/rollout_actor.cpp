// Rollout actor behaviour; see rollout_actor.hpp.
#include "actors/run/rollout_actor.hpp"

#include "actors/introspection.hpp"

#include "algo/trajectory.hpp"
#include "base/error.hpp"
#include "base/hash.hpp"
#include "gpu/device_weights.hpp"
#include "model/device.hpp"
#include "model/generation.hpp"
#include "model/tensor_blob.hpp"
#include "model/transformer.hpp"
#include "rollout/episode_engine.hpp"
#include "tokenizer/load_tokenizer.hpp"
#include "weights/receiver.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <type_traits>

namespace sao::actors {

namespace {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Ids of one open episode (the state machine holds the rest).
struct EpisodeIds {
  int64_t episode_id = 0;
  int64_t group_id = 0;
  bool reported = false;  // counted as lost (an env error) before its row ended
};
}  // namespace

struct RolloutActorState {
  RolloutActorConfig config;
  model::CausalLM policy{nullptr};
  torch::Device device = torch::kCPU;
  int64_t version = -1;
  bool switch_at_turn_boundary = false;  // rollout.weight_switch
  // Takes each weight packet by its route and checks what was loaded
  // (weights/receiver.hpp); holds a bulk read until it is applied.
  std::unique_ptr<weights::Receiver> receiver;
  // The received message itself (a weights::Packet), kept by reference:
  // CAF shares one copy of the weights between every in-process rollout, and
  // holding the message instead of the struct keeps it that way.
  caf::message pending_weights;
  // The episodes in flight, decoded together with continuous batching: a
  // row that ends is reported and closed, and its slot opens the next.
  std::unique_ptr<rollout::EpisodeEngine> episodes;
  std::map<size_t, EpisodeIds> ids;  // by row of `episodes`
  // Sync mode: a round is `slots` episodes at one version; the next waits
  // for new weights.
  int64_t round_version = -1;
  int64_t round_opened = 0;
  int64_t last_round_version = -1;
  int64_t next_episode = 0;
  int64_t next_group = 0;
  bool paused = false;
  bool replay_full = false;
  // From the replay's newest answer; -1 until the first one.
  int64_t replay_room = -1;
  bool learner_starved = true;
  // Trajectories sent to replay whose answer has not come back: they count
  // against the replay's room when deciding to open another episode.
  int64_t unacked = 0;
  bool decode_scheduled = false;
  bool retry_scheduled = false;
  int64_t env_requests_in_flight = 0;  // sent to the env actor, not yet answered
  // Introspection numbers.
  int64_t episodes_done = 0;
  int64_t episodes_lost = 0;
  int64_t episodes_held_out = 0;
  int64_t tokens_generated = 0;
  int64_t weight_switches = 0;
  ActorCounters counters;
  static inline const char* name = "rollout";
};

namespace {
using RolloutSelf = RolloutActor::stateful_pointer<RolloutActorState>;

void fill_slots(RolloutSelf self);
void schedule_decode(RolloutSelf self);

void note_replay_answer(RolloutActorState& state, const msg::ReplayAck& ack) {
  state.replay_full = ack.full;
  state.replay_room = ack.room;
  state.learner_starved = ack.learner_starved;
}

// Another episode opens only when the replay has room for it beside the
// episodes already in flight and those sent but not yet answered, or when
// the learner cannot step without more (fewer than replay.min_batch held;
// an empty replay always). Otherwise a rollout would keep generating while
// the learner is busy, and every trajectory would wait more than one
// learner step.
bool replay_has_room(const RolloutActorState& state) {
  if (state.replay_full) return false;
  if (state.replay_room < 0) return true;
  const auto in_flight = static_cast<int64_t>(state.episodes->open_rows()) + state.unacked;
  // A starved learner gets an episode even when the room says none, but
  // only while nothing is in flight: a stale "starved" answer (the replay
  // was empty when it answered) used to open episodes past the room, and a
  // step then found 33 trajectories in a replay of capacity 32.
  if (state.learner_starved && in_flight == 0) return true;
  return state.replay_room > in_flight;
}

// A row is mid-turn: generating, or queued in the engine for its turn.
bool any_generating(const RolloutActorState& state) {
  return state.episodes->any_generating();
}

// A turn is being decoded with the weights of now (turn_boundary waits for none).
bool turns_running(const RolloutActorState& state) {
  return state.episodes->engine().stats().running > 0;
}

// Registers with weight-sync, saying where this rollout runs (weight-sync
// chooses the route from it).
void register_with_weight_sync(RolloutSelf self) {
  auto& state = self->state;
  msg::RolloutPlacement placement;
  placement.device = model::device_name(state.device);
  placement.gpu_uuid = gpu::gpu_uuid_of(state.device);
  placement.bf16_replica = state.config.rollout.bf16_replica();
  self->send(state.config.weight_sync, atoms::register_atom_v, state.config.name, caf::actor_cast<RolloutActor>(self),
             placement);
}

std::string weights_where(const RolloutActorState& state, const weights::Packet& packet) {
  return state.config.name + ": weights v" + std::to_string(packet.version);
}

// Tells weight-sync that a packet's route failed here (the version was not
// applied): it sends the newest version by the next route.
void refuse_route(RolloutSelf self, const weights::Packet& packet, const std::string& error) {
  auto& state = self->state;
  state.counters.last_error = error;
  msg::VersionAck ack;
  ack.rollout = state.config.name;
  ack.version = state.version;
  ack.failed_route = packet.route;
  ack.error = error;
  self->send(state.config.weight_sync, ack);
}

void apply_weights(RolloutSelf self, const weights::Packet& packet) {
  auto& state = self->state;
  weights::Applied applied;
  {
    report::WorkTimer timer(state.counters.work[report::kWorkWeights]);
    try {
      applied = state.receiver->apply(packet, *state.policy, weights_where(state, packet));
    } catch (const Error& error) {
      // CUDA IPC can be refused where the GPU is shared but the processes
      // are not (containers without a shared IPC namespace).
      std::fprintf(stderr, "%s; asking for the next route\n", error.what());
      refuse_route(self, packet, error.what());
      return;
    }
  }
  msg::VersionAck ack;
  ack.rollout = state.config.name;
  ack.checksum = applied.checksum;
  ack.verified = applied.verified;
  // A mismatch by any route but CAF bytes keeps the old version number:
  // weight-sync sends the full version by the next route. By CAF bytes, the
  // last route, the version stands and the mismatch is on record.
  if (applied.verified || packet.route == weights::Route::kCafBytes) {
    state.version = packet.version;
    ++state.weight_switches;
  }
  if (!applied.verified) {
    state.counters.last_error = weights_where(state, packet) + ": loaded weights do not match the version's checksum";
    std::fprintf(stderr, "%s\n", state.counters.last_error.c_str());
  }
  ack.version = state.version;
  self->send(state.config.weight_sync, ack);
}

// Takes what a packet's route cannot leave for later (a bulk read, while the
// server still holds the version). False when the packet cannot be applied:
// the ack then tells weight-sync to send the newest version again (the
// server had moved past this one) or, after an error, by the next route.
bool take_weights(RolloutSelf self, const weights::Packet& packet) {
  auto& state = self->state;
  report::WorkTimer timer(state.counters.work[report::kWorkWeights]);
  try {
    if (state.receiver->take(packet, weights_where(state, packet))) return true;
    msg::VersionAck ack;  // the version was not there any more: send the newest again
    ack.rollout = state.config.name;
    ack.version = state.version;
    self->send(state.config.weight_sync, ack);
  } catch (const Error& error) {
    refuse_route(self, packet, error.what());
  }
  return false;
}

// turn_boundary: held weights are applied once no turn is running; until
// then no queued turn is admitted, so the running ones drain.
void apply_pending_weights(RolloutSelf self) {
  auto& state = self->state;
  if (state.pending_weights.empty() || turns_running(state)) return;
  const auto pending = std::move(state.pending_weights);
  state.pending_weights = caf::message{};
  apply_weights(self, pending.get_as<weights::Packet>(0));
  state.episodes->engine().set_admission_open(true);
  if (state.episodes->has_decode_work()) schedule_decode(self);
}

void report_lost(RolloutSelf self, size_t index, msg::LossCause cause, const std::string& detail) {
  auto& state = self->state;
  auto& ids = state.ids.at(index);
  if (ids.reported) return;
  ids.reported = true;
  ++state.episodes_lost;
  state.counters.last_error = detail;
  self->send(state.config.coordinator, msg::EpisodeLost{state.config.name, cause, detail});
}

// A row that ends without its environment saying so (cut by max_turns or
// the context, or lost on our side) still holds an episode there: the env
// hears why, so it frees it (and the agent endpoint answers its caller).
void tell_env_of_cut(RolloutSelf self, size_t index) {
  auto& state = self->state;
  const auto& row = state.episodes->row(index);
  if (!state.config.env || row.env_error) return;
  std::string reason;
  if (row.state == rollout::RowState::kLost) {
    reason = row.lost_reason;
  } else if (!row.ended_by_env) {
    const auto max_turns = state.config.rollout.max_turns;
    reason = static_cast<int64_t>(row.turns.size()) >= max_turns
                 ? "the episode reached rollout.max_turns (" + std::to_string(max_turns) + ")"
                 : "the conversation filled the model's context (" +
                       std::to_string(state.config.model.max_position_embeddings) + " tokens)";
  } else {
    return;
  }
  self->send(state.config.env, atoms::ended_atom_v, state.ids.at(index).episode_id, reason);
}

// Sends every newly finished episode to replay and counts every newly lost
// one, closes their rows (their blocks are already back in the pool) and
// opens the next episodes in their slots.
void report_rows(RolloutSelf self) {
  auto& state = self->state;
  for (const auto index : state.episodes->row_ids()) {
    const auto& row = state.episodes->row(index);
    if (row.state == rollout::RowState::kLost) {
      // Env errors were counted with their cause when they happened.
      report_lost(self, index, msg::LossCause::kBadEpisode, row.lost_reason);
    } else if (row.state == rollout::RowState::kFinished && row.held_out) {
      ++state.episodes_held_out;  // scored by the agent endpoint, never trained on
    } else if (row.state == rollout::RowState::kFinished) {
      algo::Trajectory trajectory;
      bool valid = true;
      try {
        trajectory = state.episodes->trajectory(index, state.ids.at(index).group_id);
      } catch (const std::exception& error) {
        report_lost(self, index, msg::LossCause::kBadEpisode, std::string("bad trajectory: ") + error.what());
        valid = false;
      }
      if (valid) {
        trajectory.origin.rollout = state.config.name;
        trajectory.origin.turns = static_cast<int64_t>(row.turns.size());
        trajectory.origin.finished_at_ns = now_ns();
        trajectory.origin.regime_index = row.regime_index;
        ++state.episodes_done;
        ++state.unacked;
        self->request(state.config.replay, caf::infinite, std::move(trajectory))
            .then([self](const msg::ReplayAck& ack) {
              auto& st = self->state;
              note_replay_answer(st, ack);
              --st.unacked;
              fill_slots(self);
            });
      }
    } else {
      continue;
    }
    tell_env_of_cut(self, index);
    state.episodes->close(index);
    state.ids.erase(index);
  }
  if (state.config.synchronous && state.round_opened >= state.config.rollout.slots &&
      state.episodes->open_rows() == 0) {
    // The round's episodes are all in: the next round waits for new weights.
    state.last_round_version = state.round_version;
    state.round_opened = 0;
  }
  fill_slots(self);
}

// An env request failed: a timeout of ours, or an error the env actor sent.
msg::LossCause cause_of(const caf::error& error) {
  if (msg::has_code(error, msg::Errc::kEnvDead)) return msg::LossCause::kEnvDead;
  return error == caf::sec::request_timeout ? msg::LossCause::kEnvTimeout : msg::LossCause::kEnvError;
}

// How long an env request may take, counted from when it is sent. An env
// actor serves one request at a time, so a request waits behind those sent
// before it (this rollout's, and those of rollouts sharing the env):
// env_timeout_ms bounds each call once it is served, not the queue. (A
// batch of 32 resets to an env that takes 1.5 s each under a 5 s timeout
// lost most of them to queueing before this.)
int64_t env_request_budget_ms(RolloutActorState& state) {
  const auto& rollout = state.config.rollout;
  const int64_t sharers = (rollout.num_actors + rollout.env_actors - 1) / rollout.env_actors;
  const int64_t queued = ++state.env_requests_in_flight;
  return rollout.env_timeout_ms * std::max<int64_t>(1, queued * sharers);
}

// Sends a reset or a step for the row at `index` to its env; the answer (or
// the failure, counted as lost with its cause) goes to the row, unless the
// row was closed meanwhile, and the rows are reported.
template <typename Request>
void ask_env(RolloutSelf self, size_t index, Request request, int64_t timeout_ms) {
  constexpr bool is_reset = std::is_same<Request, msg::EnvReset>::value;
  // The agent endpoint answers when its agent calls (or ends the session itself).
  const caf::duration timeout = self->state.config.env_is_agent_endpoint
                                    ? caf::duration{caf::infinite}
                                    : caf::duration{std::chrono::milliseconds(timeout_ms)};
  self->request(self->state.config.env, timeout, std::move(request))
      .then(
          [self, index](const msg::EnvReply& reply) {
            auto& st = self->state;
            --st.env_requests_in_flight;
            if (!st.episodes->contains(index)) return;
            if (is_reset) {
              st.episodes->reset_done(index, reply.outcome);
            } else {
              st.episodes->step_done(index, reply.outcome);
            }
            if (st.episodes->has_decode_work()) schedule_decode(self);
            report_rows(self);
          },
          [self, index](const caf::error& error) {
            auto& st = self->state;
            --st.env_requests_in_flight;
            if (!st.episodes->contains(index)) return;
            const auto detail = std::string(is_reset ? "env reset: " : "env step: ") + self->system().render(error);
            report_lost(self, index, cause_of(error), detail);
            if (is_reset) {
              st.episodes->reset_failed(index, detail);
            } else {
              st.episodes->step_failed(index, detail);
            }
            report_rows(self);
          });
}

void request_step(RolloutSelf self, const rollout::TurnEnd& ended) {
  auto& state = self->state;
  const size_t index = ended.row;
  const auto timeout = env_request_budget_ms(state);
  msg::EnvAction action;
  action.episode_id = state.ids.at(index).episode_id;
  action.action = ended.action_text;
  action.deadline_unix_ms = unix_time_ms() + timeout;
  const auto& row = state.episodes->row(index);
  const auto& turn = row.current;
  action.context_tokens = static_cast<int64_t>(row.prompt.size());
  for (const auto& earlier : row.turns)
    action.context_tokens += static_cast<int64_t>(earlier.action_tokens.size() + earlier.observation.size());
  action.action_ids = turn.action_tokens;
  action.logprobs = turn.logprobs;
  action.versions = turn.versions;
  action.closed = ended.closed;
  ask_env(self, index, std::move(action), timeout);
}

void schedule_decode(RolloutSelf self) {
  if (self->state.decode_scheduled) return;
  self->state.decode_scheduled = true;
  self->send(self, atoms::decode_atom_v);
}

void decode_step(RolloutSelf self) {
  auto& state = self->state;
  state.decode_scheduled = false;
  if (!state.episodes->has_decode_work()) return;
  std::vector<rollout::TurnEnd> ended;
  {
    report::WorkTimer timer(state.counters.work[report::kWorkModel]);
    ended = state.episodes->decode_step(state.policy, state.version);
  }
  state.tokens_generated += state.episodes->tokens_last_step();
  for (const auto& turn : ended) request_step(self, turn);
  apply_pending_weights(self);
  if (state.episodes->has_decode_work()) schedule_decode(self);
}

void retry_later(RolloutSelf self) {  // asks replay for room again in 20 ms
  if (self->state.retry_scheduled) return;
  self->state.retry_scheduled = true;
  self->delayed_send(self, std::chrono::milliseconds(20), atoms::open_atom_v);
}

// Opens one episode in a free slot: asks its env for the reset; the prompt
// joins the decode engine as soon as the answer comes.
void open_episode(RolloutSelf self) {
  auto& state = self->state;
  const size_t index = state.episodes->open();
  auto& ids = state.ids[index];
  if (state.next_episode % state.config.group_size == 0) ++state.next_group;
  // Group ids are unique across rollout actors; members of a group share the reset seed, hence the prompt.
  ids.group_id = (state.config.index << 40) + state.next_group;
  const uint64_t seed = base::splitmix64(state.config.seed * 1000003ULL + static_cast<uint64_t>(ids.group_id));
  ids.episode_id = (state.config.index << 40) + state.next_episode++;
  const auto timeout = env_request_budget_ms(state);
  ask_env(self, index, msg::EnvReset{ids.episode_id, seed, unix_time_ms() + timeout}, timeout);
}

void fill_slots(RolloutSelf self) {
  auto& state = self->state;
  // Held weights wait for the running turns; those may have ended without a
  // decode step after them (every reply path comes through here).
  apply_pending_weights(self);
  // No env: a cluster rollout waits until the coordinator assigns one.
  if (state.paused || state.version < 0 || !state.config.env) return;
  const auto slots = state.config.rollout.slots;
  if (state.config.synchronous) {
    if (state.version <= state.last_round_version) return;  // wait for new weights
    if (state.round_opened == 0) state.round_version = state.version;
  }
  while (static_cast<int64_t>(state.episodes->open_rows()) < slots) {
    if (state.config.synchronous && state.round_opened >= slots) return;
    if (!replay_has_room(state)) {
      retry_later(self);
      return;
    }
    ++state.round_opened;
    open_episode(self);
  }
}

msg::ActorStatus status_of(RolloutSelf self) {
  const auto& state = self->state;
  std::string activity = "idle";
  const bool open = state.episodes->open_rows() > 0;
  if (state.paused) {
    // A paused rollout finishes the episodes it has in flight first.
    activity = open ? "pausing" : "paused";
  } else if (any_generating(state)) {
    activity = "generating";
  } else if (open) {
    activity = "waiting_env";
  }
  const int64_t turn = state.episodes->current_turn();
  const auto kv = state.episodes->engine().stats();
  const auto decode = state.counters.work.find(report::kWorkModel);
  const double decode_seconds = decode == state.counters.work.end() ? 0.0 : decode->second.wall_s;
  return describe_actor(
      self, state.config.name, "rollout", activity, state.counters,
      {{"policy_version", static_cast<double>(state.version)},
       {"episodes_done", static_cast<double>(state.episodes_done)},
       {"episodes_lost", static_cast<double>(state.episodes_lost)},
       {"episodes_held_out", static_cast<double>(state.episodes_held_out)},
       {"tokens_generated", static_cast<double>(state.tokens_generated)},
       {"tokens_per_s", decode_seconds > 0 ? static_cast<double>(state.tokens_generated) / decode_seconds : 0.0},
       {"weight_switches", static_cast<double>(state.weight_switches)},
       {"current_turn", static_cast<double>(turn)},
       {"slots_in_use", static_cast<double>(state.episodes->open_rows())},
       {"kv_blocks_in_use", static_cast<double>(kv.blocks_in_use)},
       {"kv_blocks_total", static_cast<double>(kv.blocks_total)},
       {"kv_tokens_cached", static_cast<double>(kv.tokens_cached)},
       {"kv_cache_bytes", static_cast<double>(kv.storage_bytes)},
       {"kv_waiting", static_cast<double>(kv.waiting)},
       {"kv_preemptions", static_cast<double>(kv.preemptions)},
       {"replay_full", state.replay_full ? 1.0 : 0.0},
       {"replay_unacked", static_cast<double>(state.unacked)},
       {"paused", state.paused ? 1.0 : 0.0}});
}
}  // namespace

RolloutActor::behavior_type rollout_behavior(RolloutSelf self, RolloutActorConfig config) {
  auto& state = self->state;
  state.config = std::move(config);
  if (state.config.group_size < 1) state.config.group_size = 1;
  // A config built by hand without a tokenizer means sao's own byte model.
  if (!state.config.tokenizer) state.config.tokenizer = tokenizer::load_tokenizer("");
  state.policy = model::CausalLM(state.config.model);
  // The run (or node) checked at start that the device exists.
  state.device = model::parse_device(state.config.rollout.device, "rollout.device");
  // A bf16 replica is converted here once; every version then arrives in
  // bf16 (weights/replica.hpp), so no step casts weights.
  state.policy->to(state.device, state.config.rollout.bf16_replica() ? torch::kBFloat16 : torch::kFloat32);
  state.policy->eval();
  const uint64_t sampling_seed =
      base::splitmix64(state.config.seed ^ (static_cast<uint64_t>(state.config.index) << 20) ^ 0x5a0ULL);
  state.receiver = std::make_unique<weights::Receiver>(state.device, state.config.bulk_reader);
  state.switch_at_turn_boundary =
      state.config.rollout.weight_switch_mode() == config::RolloutSection::WeightSwitch::kTurnBoundary;
  state.episodes = std::make_unique<rollout::EpisodeEngine>(
      *state.config.tokenizer, state.config.rollout.episode_settings(), state.config.model,
      state.config.rollout.engine_limits(state.config.model.max_position_embeddings), sampling_seed);
  // Ask for the current weights; generation starts when they arrive.
  register_with_weight_sync(self);
  return counted_behavior<RolloutActor::behavior_type>(
      self,
      // By const reference: a mutable one would make CAF copy the shared
      // weights for this rollout (copy-on-write).
      [self](const weights::Packet& weights) {
        auto& st = self->state;
        if (weights.version <= st.version) return;
        // A notice's bytes are read at once, while the server still holds
        // this version; applying them may wait for a turn boundary.
        if (!take_weights(self, weights)) return;
        if (st.switch_at_turn_boundary && turns_running(st)) {
          // Held until the running turns end; no queued turn starts meanwhile.
          st.pending_weights = self->current_mailbox_element()->copy_content_to_message();
          st.episodes->engine().set_admission_open(false);
        } else {
          st.pending_weights = caf::message{};  // a newer version replaces a held one
          st.episodes->engine().set_admission_open(true);
          apply_weights(self, weights);
          if (st.episodes->has_decode_work()) schedule_decode(self);
        }
        fill_slots(self);
      },
      [self](atoms::decode_atom) { decode_step(self); },
      [self](atoms::open_atom) {
        self->state.retry_scheduled = false;
        if (replay_has_room(self->state)) {
          fill_slots(self);
          return;
        }
        // Back-pressure: ask replay whether there is room again before generating more.
        self->request(self->state.config.replay, std::chrono::seconds(5), atoms::room_atom_v)
            .then(
                [self](const msg::ReplayAck& room) {
                  note_replay_answer(self->state, room);
                  if (!replay_has_room(self->state)) {
                    retry_later(self);
                  } else {
                    fill_slots(self);
                  }
                },
                [self](const caf::error&) { retry_later(self); });
      },
      [self](atoms::pause_atom) { self->state.paused = true; },
      [self](atoms::resume_atom) {
        self->state.paused = false;
        fill_slots(self);
      },
      [self](atoms::env_atom, const EnvActor& env) {
        // The coordinator replaced our env actor (restart after a failure, or
        // an env node joined or left); a null handle means none for now.
        self->state.config.env = env;
        fill_slots(self);
      },
      [self](atoms::learner_idle_atom, int64_t version) {
        // Sync mode: the learner consumed the last round and kept the policy
        // at `version` (critic warm-up or a skipped step): the next round
        // runs on the weights this rollout already has.
        auto& st = self->state;
        if (!st.config.synchronous || version != st.version) return;
        st.last_round_version = st.version - 1;
        st.round_opened = 0;
        fill_slots(self);
      },
      [self](atoms::status_atom) { return status_of(self); });
}

RolloutActorConfig rollout_config_from_run(const config::RunConfig& run, std::string name, int64_t index,
                                           std::shared_ptr<const tokenizer::Tokenizer> tokenizer) {
  RolloutActorConfig config;
  config.name = std::move(name);
  config.index = index;
  config.model = run.model;
  config.tokenizer = std::move(tokenizer);
  config.rollout = run.rollout;
  config.group_size = run.replay.group_size;
  config.synchronous = run.replay.synchronous;
  config.seed = static_cast<uint64_t>(run.run.seed);
  return config;
}

RolloutActor spawn_rollout_actor(caf::actor_system& system, RolloutActorConfig config) {
  return system.spawn<caf::detached>(rollout_behavior, std::move(config));
}

}  // namespace sao::actors
