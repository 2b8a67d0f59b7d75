// The agent endpoint's HTTP side: an OpenAI-compatible chat API whose
// sessions the agent actor turns into episodes (agent_actor.hpp).
//
//   GET  /v1/models                      the run's model
//   POST /v1/chat/completions            one turn of a session (the session:
//                                        the X-Session-Id header, else the
//                                        request's "user"); "stream": true
//                                        answers as server-sent events
//   POST /v1/episodes/{session}/reward   {"reward": r} or {"rewards": [...]},
//                                        "split": "train" | "test": ends the episode
//
// Every request needs the run's token (Authorization: Bearer TOKEN, written
// with the URL to RUN_DIR/agent.json, owner-only); a missing or wrong one
// gets 401. Errors come in the API's shape, {"error": {"message", "type",
// "code"}}, with 400 (a request the endpoint cannot honour, named field by
// field), 404, 409 (edited history, a call in flight), 413 (body over
// agent.max_body_bytes), 503 (no rollout slot in time, the run ending).
// A streamed reply is sent whole when the turn ends (the events are the
// API's; they arrive together).
#pragma once

#include "actors/protocol.hpp"
#include "config/run_config.hpp"
#include "net/event_http_server.hpp"

#include <memory>
#include <string>

namespace sao::tokenizer {
class Tokenizer;
}

namespace sao::actors {

class AgentServer {
 public:
  // Listens on run.agent.listen:port (a taken port falls back to a free
  // one, with a warning) and writes RUN_DIR/agent.json {url, token}.
  // Throws sao::Error when it cannot listen or write the file.
  AgentServer(caf::actor_system& system, AgentActor agent, std::shared_ptr<const tokenizer::Tokenizer> tokenizer,
              const config::RunConfig& run);
  ~AgentServer();  // stops serving and joins its threads
  AgentServer(const AgentServer&) = delete;
  AgentServer& operator=(const AgentServer&) = delete;

  int port() const;
  std::string url() const;  // http://HOST:PORT/v1
  const std::string& token() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// RUN_DIR/agent.json as a running AgentServer wrote it.
struct AgentEndpoint {
  std::string url;
  std::string token;
};
// Throws sao::Error naming the file when it is missing or not {url, token}.
AgentEndpoint read_agent_endpoint(const std::string& run_dir);

// The name replies give the model: agent.model_name, else the model
// directory's last path component, else "sao".
std::string served_model_name(const config::RunConfig& run);

}  // namespace sao::actors
