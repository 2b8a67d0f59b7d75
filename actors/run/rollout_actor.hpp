// Rollout actor: a policy replica that plays episodes against an env actor
// and sends one trajectory per finished episode to replay.
//
// Decoding is cut into message-sized pieces: every decode step is one
// message the actor sends itself, so a weight update that arrives between
// two steps is applied before the next one ("in_flight"), or held until no
// row is mid-turn ("turn_boundary"). Each token records the version that
// produced it. The actor runs detached (its own thread), because a decode
// step blocks for the length of a forward pass.
#pragma once

#include "actors/protocol.hpp"
#include "config/run_config.hpp"
#include "model/model_config.hpp"
#include "tokenizer/tokenizer.hpp"

#include <memory>
#include <string>

namespace sao::net {
class SharedBulkReader;
}

namespace sao::actors {

struct RolloutActorConfig {
  std::string name;  // e.g. "rollout-0"
  int64_t index = 0;
  model::ModelConfig model;
  // Shared by every rollout actor of the process (encode/decode are const);
  // null means sao's byte tokenizer.
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer;
  config::RolloutSection rollout;
  int64_t group_size = 1;    // G episodes share a prompt (GRPO)
  bool synchronous = false;  // one batch per weight version (batch barrier)
  uint64_t seed = 1;
  EnvActor env;  // may start null (a cluster rollout served by env nodes): it waits for one
  // The env is the agent endpoint (agent.endpoint): a reset waits for an
  // agent to start a session and a step for its next call, as long as the
  // agent takes; the endpoint ends abandoned sessions itself
  // (agent.session_timeout_s), so requests to it carry no timeout here.
  bool env_is_agent_endpoint = false;
  ReplayActor replay;
  WeightSyncActor weight_sync;
  CoordinatorActor coordinator;
  // Reads the bytes a bulk-channel weight notice names from the learner
  // (the host this node joined, the cluster secret, its certificates); one
  // per node process, shared by its rollouts so the node downloads each
  // version once. Null: this rollout runs in the learner's process and is
  // never sent a notice.
  std::shared_ptr<net::SharedBulkReader> bulk_reader;
};

// A rollout actor's settings from the run config; the caller fills in the
// actors it talks to. `index` must be unique across the run (it keys episode
// and group ids and the sampling seed).
// `tokenizer` is loaded once per process (tokenizer::load_tokenizer with the
// run's model.path and prompt_format) and shared by its rollout actors.
RolloutActorConfig rollout_config_from_run(const config::RunConfig& run, std::string name, int64_t index,
                                           std::shared_ptr<const tokenizer::Tokenizer> tokenizer);

// Spawns the actor (state and behaviour are private to the .cpp).
RolloutActor spawn_rollout_actor(caf::actor_system& system, RolloutActorConfig config);

}  // namespace sao::actors
