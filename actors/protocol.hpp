// The typed actor protocol: what each actor of a run accepts and answers,
// checked by the compiler at every send and request. Every actor is spawned
// through one of these interfaces (the message structs and atoms are in
// messages.hpp). An interface lists an actor's self-messages too (a rollout's
// decode steps), because a typed actor can only receive what it declares.
//
// Two places hold untyped handles on purpose: the caller that waits for
// RunFinished (a blocking scoped actor), and the cluster gatekeeper's join
// handshake, which uses CAF's built-in types only so that a node built from
// other sources can still read the refusal; after the build fingerprint
// matched, the handles it hands out are cast to these interfaces once
// (actors/cluster/cluster.cpp).
#pragma once

#include "actors/messages.hpp"

#include <caf/all.hpp>

#include <string>
#include <vector>

namespace sao::actors {

// What every actor answers: the introspection console asks all of them
// through this interface (every interface below includes it).
using StatusActor = caf::typed_actor<caf::replies_to<atoms::status_atom>::with<msg::ActorStatus>>;

using EnvActor = caf::typed_actor<caf::replies_to<msg::EnvReset>::with<msg::EnvReply>,
                                  caf::replies_to<msg::EnvAction>::with<msg::EnvReply>,
                                  caf::reacts_to<atoms::train_step_atom, int64_t>,
                                  caf::reacts_to<atoms::reply_due_atom, int64_t>,  // self: env latency
                                  // A rollout closed an episode the env did not end (cut by
                                  // rollout.max_turns or the context, or lost), with why.
                                  caf::reacts_to<atoms::ended_atom, int64_t, std::string>,
                                  caf::replies_to<atoms::status_atom>::with<msg::ActorStatus>>;

// The agent endpoint's actor (actors/agent/agent_actor.hpp) is an env to the
// rollouts, and answers the HTTP workers' calls.
using AgentActor = EnvActor::extend<caf::replies_to<msg::AgentCall>::with<msg::AgentTurn>,
                                    caf::replies_to<msg::AgentReward>::with<msg::AgentRewardAck>,
                                    caf::reacts_to<atoms::expire_atom, std::string, int64_t>>;

using RolloutActor = caf::typed_actor<caf::reacts_to<weights::Packet>,
                                      caf::reacts_to<atoms::decode_atom>,  // self: one decode step
                                      caf::reacts_to<atoms::open_atom>,    // self: try to open episodes
                                      caf::reacts_to<atoms::pause_atom>, caf::reacts_to<atoms::resume_atom>,
                                      caf::reacts_to<atoms::env_atom, EnvActor>,  // the env to play against
                                      // sync mode: the learner ended a step without new weights
                                      caf::reacts_to<atoms::learner_idle_atom, int64_t>,
                                      caf::replies_to<atoms::status_atom>::with<msg::ActorStatus>>;

using ReplayActor = caf::typed_actor<
    caf::replies_to<algo::Trajectory>::with<msg::ReplayAck>, caf::replies_to<atoms::room_atom>::with<msg::ReplayAck>,
    caf::reacts_to<atoms::learner_idle_atom, int64_t>, caf::replies_to<msg::SetKnob>::with<std::string>,
    caf::replies_to<atoms::status_atom>::with<msg::ActorStatus>>;

using WeightSyncActor =
    caf::typed_actor<caf::reacts_to<weights::Packet>,
                     caf::reacts_to<atoms::register_atom, std::string, RolloutActor, msg::RolloutPlacement>,
                     caf::reacts_to<msg::VersionAck>, caf::replies_to<atoms::versions_atom>::with<msg::RolloutVersions>,
                     caf::replies_to<atoms::status_atom>::with<msg::ActorStatus>>;

using MetricsActor =
    caf::typed_actor<caf::reacts_to<msg::StepReport>, caf::reacts_to<msg::EvalReport>,
                     caf::reacts_to<msg::ControlEvent>, caf::reacts_to<msg::EpisodeLost>,
                     caf::reacts_to<msg::ActorRestarted>,
                     // The console's history (GET /api/metrics), as typed lines.
                     caf::replies_to<atoms::history_atom, int64_t>::with<report::MetricsHistory>,
                     // The end of the run: writes RUN_DIR/summary.json, answers its path.
                     caf::replies_to<atoms::summary_atom, std::vector<msg::ActorStatus>>::with<std::string>,
                     caf::replies_to<atoms::status_atom>::with<msg::ActorStatus>>;

using IntrospectionActor = caf::typed_actor<caf::replies_to<atoms::snapshot_atom>::with<std::vector<msg::ActorStatus>>,
                                            caf::replies_to<atoms::status_atom>::with<msg::ActorStatus>>;

using CoordinatorActor = caf::typed_actor<
    // From the learner and the rollouts (an EvalReport only when it found the environment dead).
    caf::reacts_to<msg::StepReport>, caf::reacts_to<msg::EpisodeLost>, caf::reacts_to<msg::EvalReport>,
    // From the process that started the run (signals).
    caf::reacts_to<atoms::stop_atom>, caf::reacts_to<atoms::pause_atom>, caf::reacts_to<atoms::resume_atom>,
    // Operator commands (console, HTTP), with their origin for control.log.
    caf::replies_to<atoms::pause_atom, std::string>::with<std::string>,
    caf::replies_to<atoms::resume_atom, std::string>::with<std::string>,
    caf::replies_to<atoms::stop_atom, std::string>::with<std::string>,
    caf::replies_to<atoms::checkpoint_atom, std::string>::with<std::string>,
    caf::replies_to<atoms::set_atom, std::string, std::string, std::string>::with<std::string>,
    // Introspection: every actor of the run with its display name.
    caf::replies_to<atoms::actors_atom>::with<std::vector<StatusActor>, std::vector<std::string>>,
    caf::replies_to<atoms::snapshot_atom>::with<std::vector<msg::ActorStatus>>,
    caf::replies_to<atoms::history_atom, int64_t>::with<report::MetricsHistory>,
    caf::replies_to<atoms::status_atom>::with<msg::ActorStatus>,
    caf::replies_to<atoms::versions_atom>::with<msg::RolloutVersions>,
    // Cluster membership (coordinator_cluster.cpp).
    caf::replies_to<atoms::join_atom, atoms::status_atom>::with<msg::ActorStatus>,
    caf::replies_to<atoms::join_atom>::with<ReplayActor, WeightSyncActor>,
    caf::replies_to<atoms::join_atom, std::string>::with<caf::node_id>,
    caf::reacts_to<atoms::join_atom, atoms::rollout_atom, std::string, RolloutActor, bool>,
    caf::reacts_to<atoms::join_atom, atoms::env_atom, std::string, EnvActor, bool>>;

using LearnerActor =
    caf::typed_actor<caf::reacts_to<atoms::start_atom, ReplayActor, WeightSyncActor, MetricsActor, CoordinatorActor>,
                     caf::reacts_to<msg::TrainBatch>, caf::replies_to<atoms::checkpoint_atom>::with<std::string>,
                     caf::replies_to<msg::SetKnob>::with<std::string>,
                     caf::replies_to<atoms::final_eval_atom>::with<msg::EvalReport>,
                     caf::replies_to<atoms::status_atom>::with<msg::ActorStatus>>;

}  // namespace sao::actors

// Handles travel inside messages (a node registers its actors with the
// coordinator; the introspection list), so each interface has a type ID.
CAF_BEGIN_TYPE_ID_BLOCK(sao_handles, caf::id_block::sao::end)
CAF_ADD_TYPE_ID(sao_handles, (sao::actors::StatusActor))
CAF_ADD_TYPE_ID(sao_handles, (std::vector<sao::actors::StatusActor>))
CAF_ADD_TYPE_ID(sao_handles, (sao::actors::EnvActor))
CAF_ADD_TYPE_ID(sao_handles, (sao::actors::RolloutActor))
CAF_ADD_TYPE_ID(sao_handles, (sao::actors::ReplayActor))
CAF_ADD_TYPE_ID(sao_handles, (sao::actors::WeightSyncActor))
CAF_ADD_TYPE_ID(sao_handles, (sao::actors::MetricsActor))
CAF_ADD_TYPE_ID(sao_handles, (sao::actors::CoordinatorActor))
CAF_END_TYPE_ID_BLOCK(sao_handles)

namespace sao::actors {
// Registers the message and handle type IDs and the "sao" error category;
// call on every actor_system_config.
inline void register_protocol(caf::actor_system_config& config) {
  register_message_types(config);
  config.add_message_types<caf::id_block::sao_handles>();
}
}  // namespace sao::actors
