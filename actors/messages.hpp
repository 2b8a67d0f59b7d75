// Every message the actors exchange: plain structs with an inspect()
// overload, registered once in the "sao" type-ID block. Nothing points into
// another actor's memory, so the same messages work inside one process and
// across machines (CAF serialises them with these inspect functions).
// Weights travel as one packed byte buffer with an index (model::PackedTensors).
#pragma once

#include "agent/openai_chat.hpp"
#include "algo/trajectory.hpp"
#include "base/allocator.hpp"
#include "config/live_knobs.hpp"
#include "model/tensor_blob.hpp"
#include "report/metrics_line.hpp"
#include "report/time_accounting.hpp"
#include "rollout/episode_engine.hpp"
#include "weights/packet.hpp"

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

namespace sao::model {
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PackedTensor& x) {
  return f(caf::meta::type_name("PackedTensor"), x.name, x.dtype, x.shape, x.offset, x.size);
}
// The buffer travels as a byte count and one raw block. On receipt it is
// made with base::make_bulk_buffer (huge pages: a 400 MB message costs ~200
// page faults, not ~100,000) after checking that the message holds that many
// bytes, so a forged count is an error, not a huge allocation.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PackedTensors& x) {
  if constexpr (std::is_base_of_v<caf::deserializer, Inspector>) {
    uint64_t size = 0;
    if (auto error = f(caf::meta::type_name("PackedTensors"), x.index, size)) return error;
    const auto* source = dynamic_cast<const caf::binary_deserializer*>(&f);
    if (source != nullptr && size > source->remaining()) {
      return caf::make_error(caf::sec::end_of_stream, "PackedTensors: the message says " + std::to_string(size) +
                                                          " bytes but holds " + std::to_string(source->remaining()));
    }
    x.bytes = base::make_bulk_buffer(static_cast<size_t>(size));
    return size > 0 ? f.apply_raw(static_cast<size_t>(size), x.bytes.data()) : caf::error{};
  } else if constexpr (std::is_base_of_v<caf::serializer, Inspector>) {
    uint64_t size = x.bytes.size();
    if (auto error = f(caf::meta::type_name("PackedTensors"), x.index, size)) return error;
    return size > 0 ? f.apply_raw(static_cast<size_t>(size), x.bytes.data()) : caf::error{};
  } else {
    // Anything else (e.g. CAF's to_string) sees the index and the byte count.
    uint64_t size = x.bytes.size();
    return f(caf::meta::type_name("PackedTensors"), x.index, size);
  }
}
}  // namespace sao::model

namespace sao::report {
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, WorkTime& x) {
  return f(caf::meta::type_name("WorkTime"), x.wall_s, x.cpu_s, x.calls);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TimeAccount& x) {
  return f(caf::meta::type_name("TimeAccount"), x.alive_s, x.process_cpu_s, x.process_cpu_at_start_s, x.work);
}
}  // namespace sao::report

namespace sao::weights {
// The route travels as its number (a peer's unknown value is refused by
// weights::check_packet); the device buffer never travels.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Packet& x) {
  return f(caf::meta::type_name("WeightPacket"), x.version, x.route, x.checksum, x.tensors, x.locator, x.bulk_port,
           x.bulk_bytes, x.delta);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Delta& x) {
  return f(caf::meta::type_name("WeightDelta"), x.base_version, x.version, x.elements, x.changed, x.payload,
           x.checksum);
}
}  // namespace sao::weights

namespace sao::algo {
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Trajectory& x) {
  // CAF packs doubles in a portable format that turns NaN ("accuracy not
  // defined") into a number, so the accuracy travels as its raw bits.
  uint64_t accuracy_bits = 0;
  uint64_t regime_bits = 0;
  std::memcpy(&accuracy_bits, &x.accuracy, sizeof(accuracy_bits));
  std::memcpy(&regime_bits, &x.origin.regime_index, sizeof(regime_bits));
  return f(caf::meta::type_name("Trajectory"), x.tokens, x.action_mask, x.behaviour_logprobs, x.policy_versions,
           x.rewards, x.terminated, x.truncated, x.group_id, accuracy_bits, x.origin.rollout, x.origin.turns,
           x.origin.finished_at_ns, regime_bits, caf::meta::load_callback([&]() -> caf::error {
             std::memcpy(&x.accuracy, &accuracy_bits, sizeof(accuracy_bits));
             std::memcpy(&x.origin.regime_index, &regime_bits, sizeof(regime_bits));
             return caf::none;
           }));
}
}  // namespace sao::algo

namespace sao::report {
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, MetricsLine& x) {
  // NaN stands for null; numbers travel as raw bits (see Trajectory).
  std::map<std::string, uint64_t> bits;
  for (const auto& [key, value] : x.numbers) std::memcpy(&bits[key], &value, sizeof(value));
  return f(caf::meta::type_name("MetricsLine"), bits, x.texts, x.flags, caf::meta::load_callback([&]() -> caf::error {
             x.numbers.clear();
             for (const auto& [key, raw] : bits) std::memcpy(&x.numbers[key], &raw, sizeof(raw));
             return caf::none;
           }));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, MetricsHistory& x) {
  return f(caf::meta::type_name("MetricsHistory"), x.steps, x.evals, x.events, x.knobs, x.has_latest, x.latest,
           x.summary);
}
}  // namespace sao::report

namespace sao::agent {
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ToolCall& x) {
  return f(caf::meta::type_name("ToolCall"), x.id, x.name, x.arguments);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ChatMessage& x) {
  return f(caf::meta::type_name("ChatMessage"), x.role, x.content, x.tool_calls, x.tool_call_id);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TurnResult& x) {
  return f(caf::meta::type_name("TurnResult"), x.id, x.model, x.created_unix_s, x.message, x.closed, x.token_ids,
           x.logprobs, x.versions, x.prompt_tokens, x.session, x.turn);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RewardRequest& x) {
  return f(caf::meta::type_name("RewardRequest"), x.turn_rewards, x.held_out, x.success);
}
}  // namespace sao::agent

namespace sao::tokenizer {
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ChatTurnMessage& x) {
  return f(caf::meta::type_name("ChatTurnMessage"), x.role, x.content);
}
}  // namespace sao::tokenizer

namespace sao::rollout {
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, EnvOutcome& x) {
  // NaN means "not reported"; it travels as raw bits (see Trajectory).
  uint64_t accuracy_bits = 0;
  uint64_t regime_bits = 0;
  std::memcpy(&accuracy_bits, &x.accuracy, sizeof(accuracy_bits));
  std::memcpy(&regime_bits, &x.regime_index, sizeof(regime_bits));
  return f(caf::meta::type_name("EnvOutcome"), x.observation, x.reward, x.terminated, x.truncated, accuracy_bits,
           x.success, regime_bits, x.reason, x.role, x.tools, x.counts, x.messages, x.max_new_tokens, x.held_out,
           x.turn_rewards, caf::meta::load_callback([&]() -> caf::error {
             std::memcpy(&x.accuracy, &accuracy_bits, sizeof(accuracy_bits));
             std::memcpy(&x.regime_index, &regime_bits, sizeof(regime_bits));
             return caf::none;
           }));
}
}  // namespace sao::rollout

namespace sao::msg {

// Errors one actor answers another with: callers branch on the code, the
// context (one string) is for people. Category "sao" (registered with the
// message types, so system().render() prints "sao.env_failed: ...").
enum class Errc : uint8_t {
  kEnvFailed = 1,       // the environment threw on reset/step
  kRequestExpired = 2,  // the caller's deadline passed before the request was served
  kUnknownEpisode = 3,  // a step for an episode this env actor does not hold
  kRefused = 4,         // a command or knob value the actor refused (the text says why)
  kCheckpointFailed = 5,
  kJoinRefused = 6,  // the cluster gatekeeper refused a node (final: retrying will not help)
  kEnvDead = 7,      // the environment failed train.max_env_failures_in_a_row calls in a row; no more are made
  // The agent endpoint's refusals (actors/agent/), each an HTTP status.
  kAgentBadRequest = 8,    // 400: the call cannot be served as sent
  kAgentNotFound = 9,      // 404: no such session
  kAgentConflict = 10,     // 409: the session is not where the call expects it (a call in flight, edited history)
  kAgentUnavailable = 11,  // 503: no rollout slot took the session in time, or the run is ending
};
inline const char* errc_name(uint8_t code) {
  switch (static_cast<Errc>(code)) {
    case Errc::kEnvFailed:
      return "env_failed";
    case Errc::kRequestExpired:
      return "request_expired";
    case Errc::kUnknownEpisode:
      return "unknown_episode";
    case Errc::kRefused:
      return "refused";
    case Errc::kCheckpointFailed:
      return "checkpoint_failed";
    case Errc::kJoinRefused:
      return "join_refused";
    case Errc::kEnvDead:
      return "env_dead";
    case Errc::kAgentBadRequest:
      return "agent_bad_request";
    case Errc::kAgentNotFound:
      return "agent_not_found";
    case Errc::kAgentConflict:
      return "agent_conflict";
    case Errc::kAgentUnavailable:
      return "agent_unavailable";
  }
  return "unknown";
}
inline caf::error make_error(Errc code, std::string what) {
  return caf::error(static_cast<uint8_t>(code), caf::atom("sao"), caf::make_message(std::move(what)));
}
inline bool has_code(const caf::error& error, Errc code) {
  return error.category() == caf::atom("sao") && error.code() == static_cast<uint8_t>(code);
}
// The text of a sao error without its code; other errors rendered by CAF.
inline std::string error_text(caf::actor_system& system, const caf::error& error) {
  const auto& context = error.context();
  if (error.category() == caf::atom("sao") && context.size() == 1 && context.match_element<std::string>(0)) {
    return context.get_as<std::string>(0);
  }
  return system.render(error);
}

// A full set of policy weights at one version travels as one
// weights::Packet (weights/packet.hpp); its route says which fields hold
// the weights. inspect() below never writes the in-process device buffer.

// Env actor protocol. Episodes are addressed by id so one env actor can run
// several episodes of a rollout batch at once.
// deadline_unix_ms: the caller stops waiting then (0 = no deadline). An env
// actor that was stuck skips requests whose caller has already given up,
// instead of working through a backlog nobody reads.
struct EnvReset {
  int64_t episode_id = 0;
  uint64_t seed = 0;
  int64_t deadline_unix_ms = 0;
};
struct EnvAction {
  int64_t episode_id = 0;
  std::string action;  // decoded action text, without the stop token
  int64_t deadline_unix_ms = 0;
  // The turn as sampled: every action id (the stop token included), its
  // log-prob and the policy version that sampled it. The agent endpoint
  // returns them to its caller; environments read the text only.
  std::vector<int64_t> action_ids;
  std::vector<float> logprobs;
  std::vector<int64_t> versions;
  bool closed = false;         // the turn ended with a stop id (false: cut at its token budget)
  int64_t context_tokens = 0;  // ids the turn was sampled after (prompt, earlier turns, observations)
};
// The environment's answer, with the info fields the runtime reads as typed
// values (rollout/episode_engine.hpp), so nobody parses JSON text on arrival.
struct EnvReply {
  int64_t episode_id = 0;
  rollout::EnvOutcome outcome;
};

// The agent endpoint: an HTTP worker asks the agent actor for a turn of a
// session, or ends one with its reward (actors/agent/agent_actor.hpp).
struct AgentCall {
  std::string session;
  std::vector<agent::ChatMessage> messages;  // the whole conversation, as the caller sent it
  std::string tools_json;                    // "" or the request's tools
  int64_t max_tokens = 0;                    // 0: the run's rollout.max_new_tokens
};
struct AgentTurn {
  agent::TurnResult result;
};
struct AgentReward {
  std::string session;
  agent::RewardRequest reward;
};
struct AgentRewardAck {
  std::string session;
  int64_t turns = 0;
  bool held_out = false;
};

// A finished episode travels from the rollout actor to replay and on to the
// learner as one algo::Trajectory (its origin says where it came from).

// Replay's answer to a trajectory, and to room_atom: the back-pressure
// signal for rollouts.
struct ReplayAck {
  bool accepted = false;
  int64_t queued = 0;
  bool full = false;
  int64_t room = 0;  // trajectories the replay takes before it is full
  // The learner's next step needs more trajectories than replay holds
  // (fewer than replay.min_batch, or no full synchronous round).
  bool learner_starved = false;
};

// Replay -> learner.
struct TrainBatch {
  std::vector<algo::Trajectory> trajectories;
  int64_t dropped_stale = 0;  // dropped since the previous batch
  int64_t queued_after = 0;
};

// Learner -> replay / metrics / coordinator after every step.
struct StepReport {
  int64_t step = 0;
  int64_t policy_version = 0;
  bool policy_updated = false;  // the step made new weights (not a critic warm-up or a skipped step)
  std::map<std::string, double> metrics;
  std::vector<double> rollout_to_learner_ms;  // one per trajectory of the batch
};

// Held-out evaluation result.
struct EvalReport {
  int64_t step = 0;
  int64_t policy_version = 0;
  double accuracy = 0.0;
  int64_t total = 0;
  std::string split = "test";
  // The environment's own tallies, summed over the held-out episodes (info
  // "counts"; arithmetic: worked, worked_correct). Empty when it reports none.
  std::map<std::string, double> counts;
  double seconds = 0.0;  // how long the evaluation took (the progress line's ETA counts evaluations)
  int64_t errors = 0;    // episodes lost to environment errors: not in `accuracy`
  // Set when the evaluation found the environment dead
  // (train.max_env_failures_in_a_row): the coordinator ends the run with it.
  std::string env_dead;
};

// Where a rollout actor runs, sent when it registers with weight-sync:
// its device ("cpu", "cuda:0") and, on a GPU of a sao with the CUDA
// transports, that GPU's UUID (a rollout process on the learner's GPU then
// gets CUDA IPC handles instead of host bytes).
struct RolloutPlacement {
  std::string device = "cpu";
  std::string gpu_uuid;
  bool bf16_replica = false;  // rollout.weights_dtype bf16: it loads bf16 versions and deltas
};

// A rollout actor reports which weight version it now runs.
struct VersionAck {
  std::string rollout;
  int64_t version = 0;
  // Set when the last packet could not be used (a failed bulk read, a
  // refused CUDA IPC handle; the version was not applied): its route and
  // why. Weight-sync then sends this rollout by the next route.
  weights::Route failed_route = weights::Route::kCafBytes;
  std::string error;
  // What the rollout's model holds after loading, checked against the
  // version's checksum. A mismatch is counted; the version is sent again by
  // the next route (CAF bytes last).
  uint64_t checksum = 0;
  bool verified = true;
};

// Why an episode was lost. The coordinator acts on the cause (an env that
// timed out is restarted), never on the words of the detail text.
// kEnvDead: the env actor declared its environment dead; the run ends.
enum class LossCause : uint8_t { kEnvError, kEnvTimeout, kBadEpisode, kNodeLost, kEnvDead };
inline std::string to_string(LossCause cause) {
  switch (cause) {
    case LossCause::kEnvError:
      return "env error";
    case LossCause::kEnvTimeout:
      return "env timeout";
    case LossCause::kBadEpisode:
      return "bad episode";
    case LossCause::kNodeLost:
      return "node lost";
    case LossCause::kEnvDead:
      return "env dead";
  }
  return "unknown";
}

// Counted episode losses (env error, timeout, crash) from rollouts.
struct EpisodeLost {
  std::string rollout;
  LossCause cause = LossCause::kEnvError;
  std::string detail;  // for people: the error as the rollout saw it
};

// The coordinator restarted an actor (counted in metrics.jsonl).
struct ActorRestarted {
  std::string kind;  // "env" or "rollout"
  std::string name;
};

// What every actor reports about itself when asked (introspection). The
// actor fills name..numbers; the introspection actor adds node and id from
// the handle it asked through.
struct ActorStatus {
  std::string name;
  std::string kind;
  std::string state;  // e.g. idle, generating, waiting_for_env, training, syncing, paused
  std::map<std::string, double> numbers;
  int64_t mailbox_depth = 0;
  int64_t messages_handled = 0;
  std::string last_error;
  std::string node;
  uint64_t actor_id = 0;
  std::string activity;  // for state "busy": what the actor is doing ("evaluating, step 12")
  // Its time accounting, typed (`numbers` repeats it for people).
  report::TimeAccount time;
};

// An operator's command that changed the run (console or HTTP): logged in
// metrics.jsonl and RUN_DIR/control.log so every change is on record.
struct ControlEvent {
  std::string command;  // pause, resume, set, checkpoint, stop
  std::string key;      // for set: the knob's name
  std::string value;    // for set: the new value as the operator wrote it; otherwise a detail
  std::string origin;   // who asked (e.g. "http 127.0.0.1")
  double number = 0.0;  // for set: the value applied
};

// Which weight version each rollout runs, by rollout name (weight-sync's
// answer to versions_atom).
struct RolloutVersions {
  std::map<std::string, int64_t> running;
};

// An operator's change of one live knob, sent by the coordinator to the
// knob's owner (config::spec_of(knob).owner); answered with what was applied.
struct SetKnob {
  config::Knob knob = config::Knob::kMaxStaleness;
  double value = 0.0;
};

// How a run ended.
enum class RunEnd : uint8_t { kBudget, kStopped, kLearnerFailed, kFinalCheckpointFailed, kGaveUp };
inline std::string to_string(RunEnd end) {
  switch (end) {
    case RunEnd::kBudget:
      return "budget";
    case RunEnd::kStopped:
      return "stopped on request";
    case RunEnd::kLearnerFailed:
      return "learner failed";
    case RunEnd::kFinalCheckpointFailed:
      return "final checkpoint failed";
    case RunEnd::kGaveUp:
      return "gave up";
  }
  return "unknown";
}

// The end of a run, sent by the coordinator to whoever started it. The
// summary is in RUN_DIR/summary.json (written by the metrics sink before).
struct RunFinished {
  int64_t steps = 0;
  int64_t policy_version = 0;
  RunEnd end = RunEnd::kBudget;
  std::string detail;  // the error, for kLearnerFailed / kFinalCheckpointFailed
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, EnvReset& x) {
  return f(caf::meta::type_name("EnvReset"), x.episode_id, x.seed, x.deadline_unix_ms);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, EnvAction& x) {
  return f(caf::meta::type_name("EnvAction"), x.episode_id, x.action, x.deadline_unix_ms, x.action_ids, x.logprobs,
           x.versions, x.closed, x.context_tokens);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, EnvReply& x) {
  return f(caf::meta::type_name("EnvReply"), x.episode_id, x.outcome);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, AgentCall& x) {
  return f(caf::meta::type_name("AgentCall"), x.session, x.messages, x.tools_json, x.max_tokens);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, AgentTurn& x) {
  return f(caf::meta::type_name("AgentTurn"), x.result);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, AgentReward& x) {
  return f(caf::meta::type_name("AgentReward"), x.session, x.reward);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, AgentRewardAck& x) {
  return f(caf::meta::type_name("AgentRewardAck"), x.session, x.turns, x.held_out);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ReplayAck& x) {
  return f(caf::meta::type_name("ReplayAck"), x.accepted, x.queued, x.full, x.room, x.learner_starved);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TrainBatch& x) {
  return f(caf::meta::type_name("TrainBatch"), x.trajectories, x.dropped_stale, x.queued_after);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, StepReport& x) {
  return f(caf::meta::type_name("StepReport"), x.step, x.policy_version, x.policy_updated, x.metrics,
           x.rollout_to_learner_ms);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, EvalReport& x) {
  return f(caf::meta::type_name("EvalReport"), x.step, x.policy_version, x.accuracy, x.total, x.split, x.counts,
           x.seconds, x.errors, x.env_dead);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RolloutPlacement& x) {
  return f(caf::meta::type_name("RolloutPlacement"), x.device, x.gpu_uuid, x.bf16_replica);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, VersionAck& x) {
  return f(caf::meta::type_name("VersionAck"), x.rollout, x.version, x.failed_route, x.error, x.checksum, x.verified);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, EpisodeLost& x) {
  return f(caf::meta::type_name("EpisodeLost"), x.rollout, x.cause, x.detail);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ActorRestarted& x) {
  return f(caf::meta::type_name("ActorRestarted"), x.kind, x.name);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ActorStatus& x) {
  return f(caf::meta::type_name("ActorStatus"), x.name, x.kind, x.state, x.numbers, x.mailbox_depth, x.messages_handled,
           x.last_error, x.node, x.actor_id, x.activity, x.time);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ControlEvent& x) {
  return f(caf::meta::type_name("ControlEvent"), x.command, x.key, x.value, x.origin, x.number);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RolloutVersions& x) {
  return f(caf::meta::type_name("RolloutVersions"), x.running);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SetKnob& x) {
  return f(caf::meta::type_name("SetKnob"), x.knob, x.value);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RunFinished& x) {
  return f(caf::meta::type_name("RunFinished"), x.steps, x.policy_version, x.end, x.detail);
}

}  // namespace sao::msg

CAF_BEGIN_TYPE_ID_BLOCK(sao, caf::first_custom_type_id)
CAF_ADD_TYPE_ID(sao, (sao::algo::Trajectory))
CAF_ADD_TYPE_ID(sao, (sao::rollout::EnvOutcome))
CAF_ADD_TYPE_ID(sao, (sao::report::MetricsHistory))
CAF_ADD_TYPE_ID(sao, (sao::weights::Packet))
CAF_ADD_TYPE_ID(sao, (sao::msg::EnvReset))
CAF_ADD_TYPE_ID(sao, (sao::msg::EnvAction))
CAF_ADD_TYPE_ID(sao, (sao::msg::EnvReply))
CAF_ADD_TYPE_ID(sao, (sao::msg::ReplayAck))
CAF_ADD_TYPE_ID(sao, (sao::msg::TrainBatch))
CAF_ADD_TYPE_ID(sao, (sao::msg::StepReport))
CAF_ADD_TYPE_ID(sao, (sao::msg::EvalReport))
CAF_ADD_TYPE_ID(sao, (sao::msg::VersionAck))
CAF_ADD_TYPE_ID(sao, (sao::msg::EpisodeLost))
CAF_ADD_TYPE_ID(sao, (sao::msg::ActorRestarted))
CAF_ADD_TYPE_ID(sao, (sao::msg::ActorStatus))
CAF_ADD_TYPE_ID(sao, (std::vector<sao::msg::ActorStatus>))
CAF_ADD_TYPE_ID(sao, (sao::msg::RunFinished))
CAF_ADD_TYPE_ID(sao, (sao::msg::ControlEvent))
CAF_ADD_TYPE_ID(sao, (sao::msg::RolloutPlacement))
CAF_ADD_ATOM(sao, sao::atoms, decode_atom, "decode")
CAF_ADD_ATOM(sao, sao::atoms, register_atom, "register")  // a rollout registers with weight-sync
CAF_ADD_ATOM(sao, sao::atoms, room_atom, "room")          // a rollout asks replay whether it has room
CAF_ADD_ATOM(sao, sao::atoms, learner_idle_atom, "lrn_idle")
CAF_ADD_ATOM(sao, sao::atoms, stop_atom, "stop")
CAF_ADD_ATOM(sao, sao::atoms, checkpoint_atom, "checkpoint")
CAF_ADD_ATOM(sao, sao::atoms, pause_atom, "pause")
CAF_ADD_ATOM(sao, sao::atoms, resume_atom, "resume")
CAF_ADD_ATOM(sao, sao::atoms, status_atom, "status")
CAF_ADD_ATOM(sao, sao::atoms, start_atom, "start")  // the run's actors, handed to the learner and the gatekeeper
CAF_ADD_ATOM(sao, sao::atoms, versions_atom, "versions")
CAF_ADD_ATOM(sao, sao::atoms, evaluate_atom, "evaluate")
CAF_ADD_ATOM(sao, sao::atoms, train_step_atom, "trainstep")
CAF_ADD_ATOM(sao, sao::atoms, set_atom, "set")
CAF_ADD_ATOM(sao, sao::atoms, snapshot_atom, "snapshot")
CAF_ADD_ATOM(sao, sao::atoms, history_atom, "history")
CAF_ADD_ATOM(sao, sao::atoms, actors_atom, "actors")
// Cluster (actors/cluster/cluster.hpp): a node joins the learner, then registers
// its rollout and env actors with the coordinator.
CAF_ADD_ATOM(sao, sao::atoms, join_atom, "join")
CAF_ADD_ATOM(sao, sao::atoms, rollout_atom, "rollout")
CAF_ADD_ATOM(sao, sao::atoms, env_atom, "env")             // also: the coordinator gives a rollout its env actor
CAF_ADD_ATOM(sao, sao::atoms, reply_due_atom, "replydue")  // self: an env reply held for its latency is due
// New atoms go last: the gatekeeper's join handshake reads type IDs that
// every sao build must agree on (actors/cluster/cluster.hpp).
CAF_ADD_ATOM(sao, sao::atoms, open_atom, "open")             // self: a rollout tries to open episodes
CAF_ADD_ATOM(sao, sao::atoms, summary_atom, "summary")       // the run ended: metrics writes summary.json
CAF_ADD_ATOM(sao, sao::atoms, final_eval_atom, "finaleval")  // the run ended: the learner's last evaluation
CAF_ADD_TYPE_ID(sao, (sao::msg::SetKnob))
CAF_ADD_TYPE_ID(sao, (sao::msg::RolloutVersions))
CAF_ADD_TYPE_ID(sao, (sao::msg::AgentCall))
CAF_ADD_TYPE_ID(sao, (sao::msg::AgentTurn))
CAF_ADD_TYPE_ID(sao, (sao::msg::AgentReward))
CAF_ADD_TYPE_ID(sao, (sao::msg::AgentRewardAck))
CAF_ADD_ATOM(sao, sao::atoms, ended_atom, "ended")    // a rollout closed an episode its env did not end
CAF_ADD_ATOM(sao, sao::atoms, expire_atom, "expire")  // self: the agent endpoint checks a session's deadline
CAF_END_TYPE_ID_BLOCK(sao)

namespace sao::actors {
// Milliseconds since the Unix epoch (deadlines that can cross processes).
inline int64_t unix_time_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Registers the "sao" type-ID block; call on every actor_system_config.
inline void register_message_types(caf::actor_system_config& config) {
  config.add_message_types<caf::id_block::sao>();
  config.add_error_category(caf::atom("sao"), [](uint8_t code, caf::atom_value, const caf::message& context) {
    std::string text = std::string("sao.") + msg::errc_name(code);
    if (context.size() == 1 && context.match_element<std::string>(0)) text += ": " + context.get_as<std::string>(0);
    return text;
  });
}
}  // namespace sao::actors
