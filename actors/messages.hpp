// Every message the actors exchange: plain structs with an inspect()
// overload, registered once in the "sao" type-ID block. Nothing points into
// another actor's memory, so the same messages work inside one process and
// across machines (CAF serialises them with these inspect functions).
// Tensors travel as bytes + dtype + shape (model::TensorBlob).
#pragma once

#include "algo/trajectory.hpp"
#include "model/tensor_blob.hpp"

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace sao::model {
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TensorBlob& x) {
  return f(caf::meta::type_name("TensorBlob"), x.name, x.dtype, x.shape, x.data);
}
}  // namespace sao::model

namespace sao::algo {
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Trajectory& x) {
  // CAF packs doubles in a portable format that turns NaN ("accuracy not
  // defined") into a number, so the accuracy travels as its raw bits.
  uint64_t accuracy_bits = 0;
  std::memcpy(&accuracy_bits, &x.accuracy, sizeof(accuracy_bits));
  return f(caf::meta::type_name("Trajectory"), x.tokens, x.action_mask, x.behaviour_logprobs, x.policy_versions,
           x.rewards, x.terminated, x.truncated, x.group_id, accuracy_bits,
           caf::meta::load_callback([&]() -> caf::error {
             std::memcpy(&x.accuracy, &accuracy_bits, sizeof(accuracy_bits));
             return caf::none;
           }));
}
}  // namespace sao::algo

namespace sao::msg {

// A full set of policy weights at one version.
struct PolicyWeights {
  int64_t version = 0;
  std::vector<model::TensorBlob> tensors;
};

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
};
struct EnvReply {
  int64_t episode_id = 0;
  std::string observation;
  double reward = 0.0;
  bool terminated = false;
  bool truncated = false;
  std::string info_json = "{}";
};

// One finished episode, sent by a rollout actor to replay.
struct TrajectoryMsg {
  algo::Trajectory trajectory;
  int64_t finished_at_ns = 0;  // steady clock when the episode ended
  std::string rollout;         // name of the rollout actor that produced it
  int64_t turns = 0;
  std::string final_info_json = "{}";  // the environment's info of the last step (e.g. a drift regime)
};

// Replay's answer to a trajectory: the back-pressure signal for rollouts.
struct ReplayAck {
  bool accepted = false;
  int64_t queued = 0;
  bool full = false;
};

// Replay -> learner.
struct TrainBatch {
  std::vector<TrajectoryMsg> items;
  int64_t dropped_stale = 0;  // dropped since the previous batch
  int64_t queued_after = 0;
};

// Learner -> replay / metrics / coordinator after every step.
struct StepReport {
  int64_t step = 0;
  int64_t policy_version = 0;
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
};

// A rollout actor reports which weight version it now runs.
struct VersionAck {
  std::string rollout;
  int64_t version = 0;
};

// Counted episode losses (env error, timeout, crash) from rollouts.
struct EpisodeLost {
  std::string rollout;
  std::string reason;
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
};

// An operator's command that changed the run (console or HTTP): logged in
// metrics.jsonl and RUN_DIR/control.log so every change is on record.
struct ControlEvent {
  std::string command;  // pause, resume, set, checkpoint, stop
  std::string key;      // for set: the knob
  std::string value;    // for set: the new value; otherwise a detail
  std::string origin;   // who asked (e.g. "http 127.0.0.1")
};

// The end of a run, sent by the coordinator to whoever started it.
struct RunFinished {
  int64_t steps = 0;
  int64_t policy_version = 0;
  std::string reason;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PolicyWeights& x) {
  return f(caf::meta::type_name("PolicyWeights"), x.version, x.tensors);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, EnvReset& x) {
  return f(caf::meta::type_name("EnvReset"), x.episode_id, x.seed, x.deadline_unix_ms);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, EnvAction& x) {
  return f(caf::meta::type_name("EnvAction"), x.episode_id, x.action, x.deadline_unix_ms);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, EnvReply& x) {
  return f(caf::meta::type_name("EnvReply"), x.episode_id, x.observation, x.reward, x.terminated, x.truncated,
           x.info_json);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TrajectoryMsg& x) {
  return f(caf::meta::type_name("TrajectoryMsg"), x.trajectory, x.finished_at_ns, x.rollout, x.turns,
           x.final_info_json);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ReplayAck& x) {
  return f(caf::meta::type_name("ReplayAck"), x.accepted, x.queued, x.full);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TrainBatch& x) {
  return f(caf::meta::type_name("TrainBatch"), x.items, x.dropped_stale, x.queued_after);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, StepReport& x) {
  return f(caf::meta::type_name("StepReport"), x.step, x.policy_version, x.metrics, x.rollout_to_learner_ms);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, EvalReport& x) {
  return f(caf::meta::type_name("EvalReport"), x.step, x.policy_version, x.accuracy, x.total, x.split);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, VersionAck& x) {
  return f(caf::meta::type_name("VersionAck"), x.rollout, x.version);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, EpisodeLost& x) {
  return f(caf::meta::type_name("EpisodeLost"), x.rollout, x.reason);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ActorStatus& x) {
  return f(caf::meta::type_name("ActorStatus"), x.name, x.kind, x.state, x.numbers, x.mailbox_depth, x.messages_handled,
           x.last_error, x.node, x.actor_id);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ControlEvent& x) {
  return f(caf::meta::type_name("ControlEvent"), x.command, x.key, x.value, x.origin);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RunFinished& x) {
  return f(caf::meta::type_name("RunFinished"), x.steps, x.policy_version, x.reason);
}

}  // namespace sao::msg

CAF_BEGIN_TYPE_ID_BLOCK(sao, caf::first_custom_type_id)
CAF_ADD_TYPE_ID(sao, (sao::msg::PolicyWeights))
CAF_ADD_TYPE_ID(sao, (sao::msg::EnvReset))
CAF_ADD_TYPE_ID(sao, (sao::msg::EnvAction))
CAF_ADD_TYPE_ID(sao, (sao::msg::EnvReply))
CAF_ADD_TYPE_ID(sao, (sao::msg::TrajectoryMsg))
CAF_ADD_TYPE_ID(sao, (sao::msg::ReplayAck))
CAF_ADD_TYPE_ID(sao, (sao::msg::TrainBatch))
CAF_ADD_TYPE_ID(sao, (sao::msg::StepReport))
CAF_ADD_TYPE_ID(sao, (sao::msg::EvalReport))
CAF_ADD_TYPE_ID(sao, (sao::msg::VersionAck))
CAF_ADD_TYPE_ID(sao, (sao::msg::EpisodeLost))
CAF_ADD_TYPE_ID(sao, (sao::msg::ActorStatus))
CAF_ADD_TYPE_ID(sao, (sao::msg::RunFinished))
CAF_ADD_TYPE_ID(sao, (std::vector<sao::msg::PolicyWeights>))
CAF_ADD_TYPE_ID(sao, (std::vector<sao::msg::EnvReset>))
CAF_ADD_TYPE_ID(sao, (std::vector<sao::msg::EnvAction>))
CAF_ADD_TYPE_ID(sao, (std::vector<sao::msg::EnvReply>))
CAF_ADD_TYPE_ID(sao, (std::vector<sao::msg::TrajectoryMsg>))
CAF_ADD_TYPE_ID(sao, (std::vector<sao::msg::ReplayAck>))
CAF_ADD_TYPE_ID(sao, (std::vector<sao::msg::TrainBatch>))
CAF_ADD_TYPE_ID(sao, (std::vector<sao::msg::StepReport>))
CAF_ADD_TYPE_ID(sao, (std::vector<sao::msg::EvalReport>))
CAF_ADD_TYPE_ID(sao, (std::vector<sao::msg::VersionAck>))
CAF_ADD_TYPE_ID(sao, (std::vector<sao::msg::EpisodeLost>))
CAF_ADD_TYPE_ID(sao, (std::vector<sao::msg::ActorStatus>))
CAF_ADD_TYPE_ID(sao, (std::vector<sao::msg::RunFinished>))
CAF_ADD_TYPE_ID(sao, (sao::msg::ControlEvent))
CAF_ADD_ATOM(sao, sao::atoms, decode_atom, "decode")
CAF_ADD_ATOM(sao, sao::atoms, register_atom, "register")
CAF_ADD_ATOM(sao, sao::atoms, learner_idle_atom, "lrn_idle")
CAF_ADD_ATOM(sao, sao::atoms, stop_atom, "stop")
CAF_ADD_ATOM(sao, sao::atoms, checkpoint_atom, "checkpoint")
CAF_ADD_ATOM(sao, sao::atoms, pause_atom, "pause")
CAF_ADD_ATOM(sao, sao::atoms, resume_atom, "resume")
CAF_ADD_ATOM(sao, sao::atoms, status_atom, "status")
CAF_ADD_ATOM(sao, sao::atoms, start_atom, "start")
CAF_ADD_ATOM(sao, sao::atoms, versions_atom, "versions")
CAF_ADD_ATOM(sao, sao::atoms, evaluate_atom, "evaluate")
CAF_ADD_ATOM(sao, sao::atoms, train_step_atom, "trainstep")
CAF_ADD_ATOM(sao, sao::atoms, set_atom, "set")
CAF_ADD_ATOM(sao, sao::atoms, snapshot_atom, "snapshot")
CAF_ADD_ATOM(sao, sao::atoms, history_atom, "history")
CAF_ADD_ATOM(sao, sao::atoms, actors_atom, "actors")
// Cluster (actors/cluster.hpp): a node joins the learner, then registers
// its rollout and env actors with the coordinator.
CAF_ADD_ATOM(sao, sao::atoms, join_atom, "join")
CAF_ADD_ATOM(sao, sao::atoms, rollout_atom, "rollout")
CAF_ADD_ATOM(sao, sao::atoms, env_atom, "env")
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
}
}  // namespace sao::actors
