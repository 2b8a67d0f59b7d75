// Agent actor: the agent endpoint's sessions, as the rollouts' environment.
// An agent that runs its own loop calls the chat endpoint; to the rollout
// actors that loop is an environment like any other, played through the
// one episode engine (continuous batching, paged KV cache, per-token
// versions, weight switches), so an agent's episode is trained exactly as
// an environment's is. The mapping:
//
//   a rollout's reset    waits for a new session's first call: its messages
//                        (system, user, tools) are the prompt;
//   the rollout's action is that call's answer (the sampled ids, their
//                        log-probs and versions go back to the caller);
//   the env's step       is the session's next call: the messages after the
//                        assistant reply the endpoint gave are the
//                        observation (tool results, the user's next words),
//                        rendered by the chat template; or its reward call,
//                        which ends the episode.
//
// Every message the caller sends back must be exactly what the session
// recorded (the assistant replies as the endpoint wrote them): sao trains
// on the ids it sampled and never re-tokenizes text, so an edited history
// is refused (409) and counted, never silently re-encoded. A session that
// neither calls nor rewards within session_timeout_ms is abandoned: its
// episode is lost, counted by cause. A new session waits for a free
// rollout slot at most queue_timeout_ms (503 after).
#pragma once

#include "actors/protocol.hpp"

#include <cstdint>
#include <string>

namespace sao::actors {

struct AgentActorConfig {
  std::string name = "agent";
  std::string model_name = "sao";       // what replies name as their model
  int64_t session_timeout_ms = 300000;  // agent.session_timeout_s
  int64_t queue_timeout_ms = 120000;    // agent.queue_timeout_s
  int64_t max_sessions = 256;           // sessions open or queued at once (503 beyond)
};

AgentActor spawn_agent_actor(caf::actor_system& system, AgentActorConfig config);

}  // namespace sao::actors
