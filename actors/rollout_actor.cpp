// Rollout actor behaviour; see rollout_actor.hpp.
#include "actors/rollout_actor.hpp"

#include "actors/introspection.hpp"

#include "algo/trajectory.hpp"
#include "base/error.hpp"
#include "base/hash.hpp"
#include "gpu/transport.hpp"
#include "model/device.hpp"
#include "model/generation.hpp"
#include "model/tensor_blob.hpp"
#include "model/transformer.hpp"
#include "net/bulk_transfer.hpp"
#include "rollout/episode_batch.hpp"
#include "tokenizer/load_tokenizer.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>

namespace sao::actors {

namespace {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Ids of one episode of the current session (the state machine holds the rest).
struct EpisodeIds {
  int64_t episode_id = 0;
  int64_t group_id = 0;
  bool reported = false;  // sent to replay or counted as lost
};
}  // namespace

struct RolloutActorState {
  RolloutActorConfig config;
  model::CausalLM policy{nullptr};
  torch::Device device = torch::kCPU;
  bool cuda_ipc_failed = false;  // then weight-sync is asked for host bytes
  int64_t version = -1;
  // The received message itself (a msg::PolicyWeights), kept by reference:
  // CAF shares one copy of the weights between every in-process rollout, and
  // holding the message instead of the struct keeps it that way.
  caf::message pending_weights;
  // The weights a bulk-channel notice named, read by receive_bulk and
  // applied by apply_weights (the buffer is shared with this process's
  // other rollouts and never written while held).
  std::vector<model::PackedTensor> bulk_index;
  std::shared_ptr<const std::vector<char>> bulk_bytes;
  std::unique_ptr<rollout::EpisodeBatch> batch;  // the session: episodes decoded together
  std::vector<EpisodeIds> ids;
  int64_t session_id = 0;
  int64_t session_version = -1;
  int64_t last_round_version = -1;
  int64_t next_episode = 0;
  int64_t next_group = 0;
  bool paused = false;
  bool replay_full = false;
  // From the replay's newest answer; -1 until the first one.
  int64_t replay_room = -1;
  bool learner_starved = true;
  // Trajectories sent to replay whose answer has not come back: the next
  // session waits for them, so that it sees how full the replay is now.
  int64_t unacked = 0;
  bool decode_scheduled = false;
  bool retry_scheduled = false;
  int64_t env_requests_in_flight = 0;  // sent to the env actor, not yet answered
  // Introspection numbers.
  int64_t episodes_done = 0;
  int64_t episodes_lost = 0;
  int64_t tokens_generated = 0;
  int64_t weight_switches = 0;
  ActorCounters counters;
  static inline const char* name = "rollout";
};

namespace {
using RolloutSelf = RolloutActor::stateful_pointer<RolloutActorState>;

void start_session(RolloutSelf self);
void schedule_decode(RolloutSelf self);

void note_replay_answer(RolloutActorState& state, const msg::ReplayAck& ack) {
  state.replay_full = ack.full;
  state.replay_room = ack.room;
  state.learner_starved = ack.learner_starved;
}

// A session starts only when the replay has room for all of it, or when
// the learner cannot step without more (fewer than replay.min_batch held;
// an empty replay always), whatever the session's size. Otherwise a rollout
// that finished a session while the learner was busy would queue past the
// capacity, and every trajectory would wait more than one learner step.
bool replay_has_room(const RolloutActorState& state) {
  if (state.replay_full) return false;
  if (state.replay_room < 0 || state.learner_starved) return true;
  return state.replay_room >= state.config.rollout.episodes_per_actor;
}

bool any_generating(const RolloutActorState& state) {
  return state.batch && state.batch->any_generating();
}

// Registers with weight-sync, saying where this rollout runs. Without the
// GPU's UUID (on the CPU, or after CUDA IPC failed here) it is sent host bytes.
void register_with_weight_sync(RolloutSelf self) {
  auto& state = self->state;
  msg::RolloutPlacement placement;
  placement.device = model::device_name(state.device);
  if (!state.cuda_ipc_failed) placement.gpu_uuid = gpu::gpu_uuid_of(state.device);
  self->send(state.config.weight_sync, atoms::register_atom_v, state.config.name, caf::actor_cast<RolloutActor>(self),
             placement);
}

void apply_weights(RolloutSelf self, const msg::PolicyWeights& weights) {
  auto& state = self->state;
  {
    report::WorkTimer timer(state.counters.work[report::kWorkWeights]);
    const auto where = state.config.name + ": weights v" + std::to_string(weights.version);
    if (weights.on_device) {
      model::load_device_packed_into_module(*state.policy, *weights.on_device, where);
    } else if (!weights.ipc_handle.empty()) {
      try {
        gpu::load_ipc_into_module(*state.policy, weights.ipc_handle, weights.tensors.index, state.device, where);
      } catch (const Error& error) {
        // CUDA IPC can be refused where the GPU is shared but the processes
        // are not (containers without a shared IPC namespace): register
        // again without the GPU's UUID and take host bytes from now on.
        // No ack: weight-sync resends the latest version on registration.
        state.cuda_ipc_failed = true;
        state.counters.last_error = error.what();
        std::fprintf(stderr, "%s; asking for host bytes instead\n", error.what());
        register_with_weight_sync(self);
        return;
      }
    } else if (weights.bulk_port > 0) {
      // Read by receive_bulk; released once applied, so the buffer can be reused.
      model::load_packed_into_module(*state.policy, state.bulk_index, state.bulk_bytes->data(),
                                     state.bulk_bytes->size(), where);
      state.bulk_bytes.reset();
    } else {
      model::load_packed_into_module(*state.policy, weights.tensors, where);
    }
  }
  state.version = weights.version;
  ++state.weight_switches;
  self->send(state.config.weight_sync, msg::VersionAck{state.config.name, state.version, ""});
}

// Reads the bytes a bulk-channel notice names (or takes the copy another
// rollout of this process read). False when they did not come: the ack then
// tells weight-sync to send the newest version again (the server had moved
// past this one) or, after an error, to send this rollout bytes in CAF
// messages.
bool receive_bulk(RolloutSelf self, const msg::PolicyWeights& notice) {
  auto& state = self->state;
  report::WorkTimer timer(state.counters.work[report::kWorkWeights]);
  std::string error;
  try {
    if (!state.config.bulk_reader) throw Error("this rollout has no reader for the bulk channel");
    state.bulk_bytes = state.config.bulk_reader->read(notice.bulk_port, notice.version, notice.bulk_bytes);
    if (state.bulk_bytes) {
      state.bulk_index = notice.tensors.index;
      return true;
    }
  } catch (const Error& failure) {
    error =
        std::string(failure.what()) + " (" + state.config.name + ", weights v" + std::to_string(notice.version) + ")";
    state.counters.last_error = error;
  }
  self->send(state.config.weight_sync, msg::VersionAck{state.config.name, state.version, error});
  return false;
}

void apply_pending_weights(RolloutSelf self) {
  auto& state = self->state;
  if (state.pending_weights.empty()) return;
  const auto pending = std::move(state.pending_weights);
  state.pending_weights = caf::message{};
  apply_weights(self, pending.get_as<msg::PolicyWeights>(0));
}

void report_lost(RolloutSelf self, size_t index, msg::LossCause cause, const std::string& detail) {
  auto& state = self->state;
  auto& ids = state.ids[index];
  if (ids.reported) return;
  ids.reported = true;
  ++state.episodes_lost;
  state.counters.last_error = detail;
  self->send(state.config.coordinator, msg::EpisodeLost{state.config.name, cause, detail});
}

// Sends every newly finished episode to replay and counts every newly lost
// one; ends the session when no episode is left.
void report_rows(RolloutSelf self) {
  auto& state = self->state;
  for (size_t index = 0; index < state.batch->size(); ++index) {
    const auto& row = state.batch->row(index);
    if (state.ids[index].reported) continue;
    if (row.state == rollout::RowState::kLost) {
      // Env errors were counted with their cause when they happened.
      report_lost(self, index, msg::LossCause::kBadEpisode, row.lost_reason);
      continue;
    }
    if (row.state != rollout::RowState::kFinished) continue;
    algo::Trajectory trajectory;
    try {
      trajectory = state.batch->trajectory(index, state.ids[index].group_id);
    } catch (const std::exception& error) {
      report_lost(self, index, msg::LossCause::kBadEpisode, std::string("bad trajectory: ") + error.what());
      continue;
    }
    trajectory.origin.rollout = state.config.name;
    trajectory.origin.turns = static_cast<int64_t>(row.turns.size());
    trajectory.origin.finished_at_ns = now_ns();
    trajectory.origin.regime_index = row.regime_index;
    state.ids[index].reported = true;
    ++state.episodes_done;
    ++state.unacked;
    self->request(state.config.replay, caf::infinite, std::move(trajectory)).then([self](const msg::ReplayAck& ack) {
      auto& st = self->state;
      note_replay_answer(st, ack);
      if (--st.unacked == 0) start_session(self);
    });
  }
  if (!state.batch->finished()) return;
  state.batch.reset();
  state.ids.clear();
  if (state.config.synchronous) state.last_round_version = state.session_version;
  start_session(self);
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

void request_step(RolloutSelf self, const rollout::TurnEnd& ended) {
  auto& state = self->state;
  const int64_t session_id = state.session_id;
  const size_t index = ended.row;
  const auto timeout = env_request_budget_ms(state);
  self->request(state.config.env, std::chrono::milliseconds(timeout),
                msg::EnvAction{state.ids[index].episode_id, ended.action_text, unix_time_ms() + timeout})
      .then(
          [self, index, session_id](const msg::EnvReply& reply) {
            auto& st = self->state;
            --st.env_requests_in_flight;
            if (st.session_id != session_id) return;
            if (!any_generating(st) && st.config.rollout.weight_switch == "turn_boundary") apply_pending_weights(self);
            st.batch->step_done(index, reply.outcome);
            if (st.batch->any_generating()) schedule_decode(self);
            report_rows(self);
          },
          [self, index, session_id](const caf::error& error) {
            auto& st = self->state;
            --st.env_requests_in_flight;
            if (st.session_id != session_id) return;
            const auto detail = "env step: " + self->system().render(error);
            report_lost(self, index, cause_of(error), detail);
            st.batch->step_failed(index, detail);
            report_rows(self);
          });
}

void begin_decoding(RolloutSelf self) {
  auto& state = self->state;
  const uint64_t seed = base::splitmix64(state.config.seed ^ (static_cast<uint64_t>(state.session_id) << 20) ^
                                         static_cast<uint64_t>(state.config.index));
  if (state.batch->start(seed, state.policy->config().max_position_embeddings)) schedule_decode(self);
  report_rows(self);
}

void schedule_decode(RolloutSelf self) {
  if (self->state.decode_scheduled) return;
  self->state.decode_scheduled = true;
  self->send(self, atoms::decode_atom_v);
}

void decode_step(RolloutSelf self) {
  auto& state = self->state;
  state.decode_scheduled = false;
  if (!any_generating(state)) return;
  std::vector<rollout::TurnEnd> ended;
  {
    report::WorkTimer timer(state.counters.work[report::kWorkModel]);
    const model::AutocastGuard autocast(state.device, state.config.rollout.bf16_autocast);
    ended = state.batch->decode_step(state.policy, state.version);
  }
  state.tokens_generated += state.batch->tokens_last_step();
  for (const auto& turn : ended) request_step(self, turn);
  if (state.config.rollout.weight_switch == "turn_boundary" && !any_generating(state)) apply_pending_weights(self);
  if (any_generating(state)) schedule_decode(self);
}

void retry_later(RolloutSelf self) {
  if (self->state.retry_scheduled) return;
  self->state.retry_scheduled = true;
  self->delayed_send(self, std::chrono::milliseconds(20), atoms::start_atom_v);
}

void start_session(RolloutSelf self) {
  auto& state = self->state;
  // No env: a cluster rollout waits until the coordinator assigns one.
  if (state.batch || state.paused || state.version < 0 || !state.config.env) return;
  if (state.config.synchronous && state.version <= state.last_round_version) return;  // wait for new weights
  // Replay's last answer for this session starts the next one.
  if (state.unacked > 0) return;
  if (!replay_has_room(state)) {
    retry_later(self);
    return;
  }
  apply_pending_weights(self);
  ++state.session_id;
  state.session_version = state.version;
  const auto episodes = static_cast<size_t>(state.config.rollout.episodes_per_actor);
  rollout::EpisodeSettings settings;
  settings.sampling.temperature = state.config.rollout.temperature;
  settings.sampling.top_k = state.config.rollout.top_k;
  settings.sampling.top_p = state.config.rollout.top_p;
  settings.sampling.max_new_tokens = state.config.rollout.max_new_tokens;
  settings.max_turns = state.config.rollout.max_turns;
  state.batch = std::make_unique<rollout::EpisodeBatch>(*state.config.tokenizer, settings, episodes);
  state.ids.assign(episodes, EpisodeIds{});
  const int64_t session_id = state.session_id;
  for (size_t index = 0; index < episodes; ++index) {
    auto& ids = state.ids[index];
    if (index % static_cast<size_t>(state.config.group_size) == 0) ++state.next_group;
    // Group ids are unique across rollout actors; members of a group share the reset seed, hence the prompt.
    ids.group_id = (state.config.index << 40) + state.next_group;
    const uint64_t seed = base::splitmix64(state.config.seed * 1000003ULL + static_cast<uint64_t>(ids.group_id));
    ids.episode_id = (state.config.index << 40) + state.next_episode++;
    const auto timeout = env_request_budget_ms(state);
    self->request(state.config.env, std::chrono::milliseconds(timeout),
                  msg::EnvReset{ids.episode_id, seed, unix_time_ms() + timeout})
        .then(
            [self, index, session_id](const msg::EnvReply& reply) {
              auto& st = self->state;
              --st.env_requests_in_flight;
              if (st.session_id != session_id) return;
              st.batch->reset_done(index, reply.outcome);
              if (!st.batch->resets_pending()) begin_decoding(self);
            },
            [self, index, session_id](const caf::error& error) {
              auto& st = self->state;
              --st.env_requests_in_flight;
              if (st.session_id != session_id) return;
              const auto detail = "env reset: " + self->system().render(error);
              report_lost(self, index, cause_of(error), detail);
              st.batch->reset_failed(index, detail);
              if (!st.batch->resets_pending()) begin_decoding(self);
            });
  }
}

msg::ActorStatus status_of(RolloutSelf self) {
  const auto& state = self->state;
  std::string activity = "idle";
  if (state.paused) {
    // A paused rollout finishes the episodes it has in flight first.
    activity = state.batch ? "pausing" : "paused";
  } else if (any_generating(state)) {
    activity = "generating";
  } else if (state.batch) {
    activity = "waiting_env";
  }
  const int64_t turn = state.batch ? state.batch->current_turn() : 0;
  const auto decode = state.counters.work.find(report::kWorkModel);
  const double decode_seconds = decode == state.counters.work.end() ? 0.0 : decode->second.wall_s;
  return describe_actor(
      self, state.config.name, "rollout", activity, state.counters,
      {{"policy_version", static_cast<double>(state.version)},
       {"episodes_done", static_cast<double>(state.episodes_done)},
       {"episodes_lost", static_cast<double>(state.episodes_lost)},
       {"tokens_generated", static_cast<double>(state.tokens_generated)},
       {"tokens_per_s", decode_seconds > 0 ? static_cast<double>(state.tokens_generated) / decode_seconds : 0.0},
       {"weight_switches", static_cast<double>(state.weight_switches)},
       {"current_turn", static_cast<double>(turn)},
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
  state.policy->to(state.device);
  state.policy->eval();
  // Ask for the current weights; generation starts when they arrive.
  register_with_weight_sync(self);
  return {
      // By const reference: a mutable one would make CAF copy the shared
      // weights for this rollout (copy-on-write).
      [self](const msg::PolicyWeights& weights) {
        auto& st = self->state;
        ++st.counters.handled;
        if (weights.version <= st.version) return;
        // A notice's bytes are read at once, while the server still holds
        // this version; applying them may wait for a turn boundary.
        if (weights.bulk_port > 0 && !receive_bulk(self, weights)) return;
        const bool mid_turn = any_generating(st);
        if (st.config.rollout.weight_switch == "turn_boundary" && mid_turn) {
          st.pending_weights = self->current_mailbox_element()->copy_content_to_message();
        } else {
          apply_weights(self, weights);
        }
        start_session(self);
      },
      [self](atoms::decode_atom) {
        ++self->state.counters.handled;
        decode_step(self);
      },
      [self](atoms::start_atom) {
        ++self->state.counters.handled;
        self->state.retry_scheduled = false;
        if (replay_has_room(self->state)) {
          start_session(self);
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
                    start_session(self);
                  }
                },
                [self](const caf::error&) { retry_later(self); });
      },
      [self](atoms::pause_atom) {
        ++self->state.counters.handled;
        self->state.paused = true;
      },
      [self](atoms::resume_atom) {
        ++self->state.counters.handled;
        self->state.paused = false;
        start_session(self);
      },
      [self](atoms::env_atom, const EnvActor& env) {
        // The coordinator replaced our env actor (restart after a failure, or
        // an env node joined or left); a null handle means none for now.
        ++self->state.counters.handled;
        self->state.config.env = env;
        start_session(self);
      },
      [self](atoms::learner_idle_atom, int64_t version) {
        // Sync mode: the learner consumed the last round and kept the policy
        // at `version` (critic warm-up or a skipped step): the next round
        // runs on the weights this rollout already has.
        auto& st = self->state;
        ++st.counters.handled;
        if (!st.config.synchronous || version != st.version) return;
        st.last_round_version = st.version - 1;
        start_session(self);
      },
      [self](atoms::status_atom) {
        ++self->state.counters.handled;
        return status_of(self);
      },
  };
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
