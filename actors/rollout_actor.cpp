// Rollout actor behaviour; see rollout_actor.hpp.
#include "actors/rollout_actor.hpp"

#include "actors/introspection.hpp"

#include "algo/trajectory.hpp"
#include "model/generation.hpp"
#include "model/tensor_blob.hpp"
#include "model/transformer.hpp"
#include "tokenizer/byte_tokenizer.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>
#include <optional>

namespace sao::actors {

namespace {
enum class RowState { kWaitingReset, kGenerating, kWaitingEnv, kDone };

struct EpisodeRow {
  int64_t episode_id = 0;
  int64_t group_id = 0;
  uint64_t seed = 0;
  std::vector<int64_t> prompt;
  std::vector<algo::Turn> turns;
  algo::Turn current;
  RowState state = RowState::kWaitingReset;
  bool lost = false;
  size_t session_row = 0;  // row index inside the DecodeSession
  double accuracy = std::numeric_limits<double>::quiet_NaN();
  std::string final_info_json = "{}";
};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

uint64_t mix_seed(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
}  // namespace

struct RolloutActorState {
  RolloutActorConfig config;
  tokenizer::ByteTokenizer tokenizer;
  model::CausalLM policy{nullptr};
  int64_t version = -1;
  std::optional<msg::PolicyWeights> pending_weights;
  std::unique_ptr<model::DecodeSession> session;
  std::vector<EpisodeRow> rows;
  int64_t session_id = 0;
  int64_t session_version = -1;
  int64_t last_round_version = -1;
  int64_t resets_outstanding = 0;
  int64_t next_episode = 0;
  int64_t next_group = 0;
  bool paused = false;
  bool replay_full = false;
  bool decode_scheduled = false;
  bool retry_scheduled = false;
  // Introspection numbers.
  int64_t episodes_done = 0;
  int64_t episodes_lost = 0;
  int64_t tokens_generated = 0;
  int64_t weight_switches = 0;
  ActorCounters counters;
  static inline const char* name = "rollout";
};

namespace {
using Self = caf::stateful_actor<RolloutActorState>*;

void start_session(Self self);
void schedule_decode(Self self);

bool any_generating(const RolloutActorState& state) {
  for (const auto& row : state.rows) {
    if (!row.lost && row.state == RowState::kGenerating) return true;
  }
  return false;
}

void apply_weights(Self self, const msg::PolicyWeights& weights) {
  auto& state = self->state;
  {
    report::WorkTimer timer(state.counters.work[report::kWorkWeights]);
    model::load_blobs_into_module(*state.policy, weights.tensors,
                                  state.config.name + ": weights v" + std::to_string(weights.version));
  }
  state.version = weights.version;
  ++state.weight_switches;
  self->send(state.config.weight_sync, msg::VersionAck{state.config.name, state.version});
}

void apply_pending_weights(Self self) {
  auto& state = self->state;
  if (!state.pending_weights) return;
  apply_weights(self, *state.pending_weights);
  state.pending_weights.reset();
}

void lose_episode(Self self, EpisodeRow& row, const std::string& reason) {
  auto& state = self->state;
  if (row.lost || row.state == RowState::kDone) return;
  row.lost = true;
  row.state = RowState::kDone;
  ++state.episodes_lost;
  state.counters.last_error = reason;
  self->send(state.config.coordinator, msg::EpisodeLost{state.config.name, reason});
}

void check_session_end(Self self) {
  auto& state = self->state;
  for (const auto& row : state.rows) {
    if (row.state != RowState::kDone) return;
  }
  state.session.reset();
  state.rows.clear();
  if (state.config.synchronous) state.last_round_version = state.session_version;
  start_session(self);
}

void send_trajectory(Self self, EpisodeRow& row, bool terminated) {
  auto& state = self->state;
  msg::TrajectoryMsg message;
  try {
    message.trajectory = algo::make_trajectory(row.prompt, row.turns, /*outcome_reward=*/0.0, terminated, row.group_id);
  } catch (const std::exception& error) {
    lose_episode(self, row, std::string("bad trajectory: ") + error.what());
    return;
  }
  message.trajectory.accuracy = row.accuracy;
  message.finished_at_ns = now_ns();
  message.rollout = state.config.name;
  message.turns = static_cast<int64_t>(row.turns.size());
  message.final_info_json = row.final_info_json;
  row.state = RowState::kDone;
  ++state.episodes_done;
  self->request(state.config.replay, caf::infinite, std::move(message)).then([self](const msg::ReplayAck& ack) {
    self->state.replay_full = ack.full;
  });
}

void on_env_reply(Self self, size_t index, const msg::EnvReply& reply, bool context_full) {
  auto& state = self->state;
  auto& row = state.rows[index];
  row.current.reward = reply.reward;
  const auto info = nlohmann::json::parse(reply.info_json, nullptr, /*allow_exceptions=*/false);
  if (info.is_object() && info.contains("accuracy") && info["accuracy"].is_number()) {
    row.accuracy = info["accuracy"].get<double>();
  }
  const bool out_of_turns = static_cast<int64_t>(row.turns.size()) + 1 >= state.config.rollout.max_turns;
  const bool done = reply.terminated || reply.truncated || out_of_turns || context_full;
  if (done) row.final_info_json = reply.info_json;
  if (!done) {
    row.current.observation = state.tokenizer.encode(reply.observation);
    if (row.current.observation.empty()) row.current.observation.push_back(*state.tokenizer.special_id("<|obs|>"));
  }
  row.turns.push_back(std::move(row.current));
  row.current = algo::Turn{};
  if (done) {
    send_trajectory(self, row, reply.terminated);
  } else {
    if (!any_generating(state) && state.config.rollout.weight_switch == "turn_boundary") apply_pending_weights(self);
    state.session->continue_row(row.session_row, row.turns.back().observation, state.config.rollout.max_new_tokens);
    row.state = RowState::kGenerating;
    schedule_decode(self);
  }
  check_session_end(self);
}

void on_turn_finished(Self self, size_t index) {
  auto& state = self->state;
  auto& row = state.rows[index];
  const auto& sequence = state.session->sequence(row.session_row);
  const auto begin = static_cast<std::ptrdiff_t>(sequence.turn_start);
  row.current.action_tokens.assign(sequence.tokens.begin() + begin, sequence.tokens.end());
  row.current.logprobs.assign(sequence.logprobs.begin() + begin, sequence.logprobs.end());
  row.current.versions.assign(sequence.versions.begin() + begin, sequence.versions.end());
  const bool context_full = sequence.finish == model::FinishReason::kContextFull;
  std::vector<int64_t> answer(row.current.action_tokens);
  const auto eos = std::find(answer.begin(), answer.end(), state.tokenizer.eos_id());
  answer.erase(eos, answer.end());
  const std::string action_text = state.tokenizer.decode(answer, /*skip_special=*/true);
  row.state = RowState::kWaitingEnv;
  const int64_t session_id = state.session_id;
  self->request(state.config.env, std::chrono::milliseconds(state.config.rollout.env_timeout_ms),
                msg::EnvAction{row.episode_id, action_text, unix_time_ms() + state.config.rollout.env_timeout_ms})
      .then(
          [self, index, session_id, context_full](const msg::EnvReply& reply) {
            if (self->state.session_id != session_id) return;
            on_env_reply(self, index, reply, context_full);
          },
          [self, index, session_id](const caf::error& error) {
            if (self->state.session_id != session_id) return;
            lose_episode(self, self->state.rows[index], "env step: " + self->system().render(error));
            check_session_end(self);
          });
}

void begin_decoding(Self self) {
  auto& state = self->state;
  std::vector<std::vector<int64_t>> prompts;
  for (auto& row : state.rows) {
    if (row.lost) continue;
    row.session_row = prompts.size();
    row.state = RowState::kGenerating;
    prompts.push_back(row.prompt);
  }
  if (prompts.empty()) {
    check_session_end(self);
    return;
  }
  model::SamplingConfig sampling;
  sampling.temperature = state.config.rollout.temperature;
  sampling.top_k = state.config.rollout.top_k;
  sampling.top_p = state.config.rollout.top_p;
  sampling.max_new_tokens = state.config.rollout.max_new_tokens;
  sampling.stop_tokens = {state.tokenizer.eos_id()};
  const uint64_t seed = mix_seed(state.config.seed ^ (static_cast<uint64_t>(state.session_id) << 20) ^
                                 static_cast<uint64_t>(state.config.index));
  state.session = std::make_unique<model::DecodeSession>(std::move(prompts), sampling, seed);
  schedule_decode(self);
}

void schedule_decode(Self self) {
  if (self->state.decode_scheduled) return;
  self->state.decode_scheduled = true;
  self->send(self, atoms::decode_atom_v);
}

void decode_step(Self self) {
  auto& state = self->state;
  state.decode_scheduled = false;
  if (!state.session || !any_generating(state)) return;
  {
    report::WorkTimer timer(state.counters.work[report::kWorkModel]);
    state.session->step(state.policy, state.version);
  }
  for (size_t index = 0; index < state.rows.size(); ++index) {
    auto& row = state.rows[index];
    if (row.lost || row.state != RowState::kGenerating) continue;
    ++state.tokens_generated;
    if (state.session->sequence(row.session_row).finish != model::FinishReason::kRunning) {
      on_turn_finished(self, index);
    }
  }
  if (state.config.rollout.weight_switch == "turn_boundary" && !any_generating(state)) apply_pending_weights(self);
  if (any_generating(state)) schedule_decode(self);
}

void retry_later(Self self) {
  if (self->state.retry_scheduled) return;
  self->state.retry_scheduled = true;
  self->delayed_send(self, std::chrono::milliseconds(20), atoms::start_atom_v);
}

void start_session(Self self) {
  auto& state = self->state;
  // No env: a cluster rollout waits until the coordinator assigns one.
  if (state.session || state.paused || state.version < 0 || !state.config.env) return;
  if (state.config.synchronous && state.version <= state.last_round_version) return;  // wait for new weights
  if (state.replay_full) {
    retry_later(self);
    return;
  }
  apply_pending_weights(self);
  ++state.session_id;
  state.session_version = state.version;
  state.rows.assign(static_cast<size_t>(state.config.rollout.episodes_per_actor), EpisodeRow{});
  state.resets_outstanding = static_cast<int64_t>(state.rows.size());
  const int64_t session_id = state.session_id;
  for (size_t index = 0; index < state.rows.size(); ++index) {
    auto& row = state.rows[index];
    if (index % static_cast<size_t>(state.config.group_size) == 0) ++state.next_group;
    // Group ids are unique across rollout actors; members of a group share the reset seed, hence the prompt.
    row.group_id = (state.config.index << 40) + state.next_group;
    row.seed = mix_seed(state.config.seed * 1000003ULL + static_cast<uint64_t>(row.group_id));
    row.episode_id = (state.config.index << 40) + state.next_episode++;
    self->request(state.config.env, std::chrono::milliseconds(state.config.rollout.env_timeout_ms),
                  msg::EnvReset{row.episode_id, row.seed, unix_time_ms() + state.config.rollout.env_timeout_ms})
        .then(
            [self, index, session_id](const msg::EnvReply& reply) {
              auto& st = self->state;
              if (st.session_id != session_id) return;
              auto& r = st.rows[index];
              r.prompt = {st.tokenizer.bos_id()};
              const auto observation = st.tokenizer.encode(reply.observation);
              r.prompt.insert(r.prompt.end(), observation.begin(), observation.end());
              if (--st.resets_outstanding == 0) begin_decoding(self);
            },
            [self, index, session_id](const caf::error& error) {
              auto& st = self->state;
              if (st.session_id != session_id) return;
              lose_episode(self, st.rows[index], "env reset: " + self->system().render(error));
              if (--st.resets_outstanding == 0) begin_decoding(self);
            });
  }
}

msg::ActorStatus status_of(Self self) {
  const auto& state = self->state;
  std::string activity = "idle";
  if (state.paused) {
    // A paused rollout finishes the episodes it has in flight first.
    activity = state.session ? "pausing" : "paused";
  } else if (any_generating(state)) {
    activity = "generating";
  } else if (state.session || state.resets_outstanding > 0) {
    activity = "waiting_env";
  }
  int64_t turn = 0;
  const auto decode = state.counters.work.find(report::kWorkModel);
  const double decode_seconds = decode == state.counters.work.end() ? 0.0 : decode->second.wall_s;
  for (const auto& row : state.rows) turn = std::max<int64_t>(turn, static_cast<int64_t>(row.turns.size()) + 1);
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
       {"paused", state.paused ? 1.0 : 0.0}});
}
}  // namespace

caf::behavior rollout_actor(caf::stateful_actor<RolloutActorState>* self, RolloutActorConfig config) {
  auto& state = self->state;
  state.config = std::move(config);
  if (state.config.group_size < 1) state.config.group_size = 1;
  state.policy = model::CausalLM(state.config.model);
  state.policy->eval();
  // Ask for the current weights; generation starts when they arrive.
  self->send(state.config.weight_sync, atoms::register_atom_v, state.config.name, caf::actor{self});
  return {
      [self](msg::PolicyWeights& weights) {
        auto& st = self->state;
        ++st.counters.handled;
        if (weights.version <= st.version) return;
        const bool mid_turn = st.session && any_generating(st);
        if (st.config.rollout.weight_switch == "turn_boundary" && mid_turn) {
          st.pending_weights = std::move(weights);
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
        if (!self->state.replay_full) {
          start_session(self);
          return;
        }
        // Back-pressure: ask replay whether there is room again before generating more.
        self->request(self->state.config.replay, std::chrono::seconds(5), atoms::status_atom_v)
            .then(
                [self](const msg::ActorStatus& replay_status) {
                  auto it = replay_status.numbers.find("full");
                  self->state.replay_full = it != replay_status.numbers.end() && it->second > 0;
                  if (self->state.replay_full) {
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
      [self](atoms::register_atom, const caf::actor& env) {
        // The coordinator replaced our env actor (restart after a failure, or
        // an env node joined or left); a null handle means none for now.
        ++self->state.counters.handled;
        self->state.config.env = env;
        start_session(self);
      },
      [self](atoms::status_atom) {
        ++self->state.counters.handled;
        return status_of(self);
      },
  };
}

RolloutActorConfig rollout_config_from_run(const config::RunConfig& run, std::string name, int64_t index) {
  RolloutActorConfig config;
  config.name = std::move(name);
  config.index = index;
  config.model = run.model;
  config.rollout = run.rollout;
  config.group_size = run.replay.group_size;
  config.synchronous = run.replay.synchronous;
  config.seed = static_cast<uint64_t>(run.run.seed);
  return config;
}

caf::actor spawn_rollout_actor(caf::actor_system& system, RolloutActorConfig config) {
  return system.spawn<caf::detached>(rollout_actor, std::move(config));
}

}  // namespace sao::actors
