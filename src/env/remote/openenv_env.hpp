// OpenEnv environments: an environment server built with OpenEnv
// (meta-pytorch/OpenEnv, openenv.core.env_server) runs under sao unchanged.
// docs/environments.md has the full mapping. Two transports, as OpenEnv's
// server has them:
//
// "websocket" (the default; what OpenEnv's current releases use for episodes
// of several steps): each OpenEnvEnvironment object holds one session, a
// WebSocket to <url>/ws with an environment of its own on the server, and
// reuses it episode after episode:
//   -> {"type":"reset","data":{"seed":S,"episode_id":"..."}}
//   <- {"type":"observation","data":{"observation":{...},"reward":null,"done":false}}
//   -> {"type":"step","data":{<action fields>}}
//   <- {"type":"observation","data":{...}}  or  {"type":"error","data":{"message":..,"code":..}}
//   -> {"type":"state"}  <- {"type":"state","data":{...}};  -> {"type":"close"}
// Sessions are spread over env.urls; the server's max_concurrent_envs bounds
// how many it holds (CAPACITY_REACHED otherwise).
//
// "http" (servers that keep one environment per process behind plain HTTP,
// as OpenEnv's HTTPEnvServer did before sessions):
//   GET  /health                      <- {"status":"healthy"}
//   POST /reset {"seed":S,"episode_id":"..."}
//                                     <- {"observation":{...},"reward":null,"done":false}
//   POST /step  {"action":{...}}      <- {"observation":{...},"reward":1.0,"done":true}
//   GET  /state                       <- {"episode_id":"...","step_count":N,...}
//   HTTP 422 {"detail":[{"type","loc","msg","input"}...]}: the action failed validation
// One such server plays one episode at a time, so each OpenEnvEnvironment
// object claims a server of env.urls (one per process, at its first reset)
// and keeps it until it is destroyed. A run needs as many servers as
// episodes it plays at once (rollout.num_actors x rollout.slots,
// and eval.batch_size during evaluation); with fewer, the reset that finds
// none free throws an error saying so.
//
// Text mapping. The policy's action text becomes the action object
// {action_key: text}; with action_key "" the text must itself be a JSON
// object (a tool call), sent as the action. The observation object becomes
// the policy's text through observation_key (that field; a non-string value
// as JSON), or the whole object as compact JSON when observation_key is "".
// OpenEnv's "done" is sao's terminated (OpenEnv has no truncation); a null
// reward is 0. An action the server refuses (HTTP 422, or VALIDATION_ERROR
// over /ws), or action text that is not a JSON object with action_key "", is
// the policy's mistake, not a broken environment: the episode ends
// (terminated) with invalid_action_reward and info.reason naming what was
// wrong. Success for the metrics: observation[success_key] (boolean or
// number) on the final step, or, with success_key "", a final reward > 0.
//
// Supervision. Every request has a deadline (timeout_ms; counted when
// missed). The first use of a server, and the first after a failure, waits
// for GET /health to answer "healthy" (up to startup_timeout_ms); a server
// used again after a failure is counted as a reconnect (at most
// max_reconnects). Any other problem - the server unreachable, an HTTP error
// status, an "error" message, a reply that is not JSON or lacks a field, the
// WebSocket closing - throws sao::Error naming the server, the request and
// the problem, and ends the episode; the runtime counts it as one lost
// episode.
//
// Held-out split: heldout_size N > 0 makes held-out episode i the reset with
// seed i (episode_id "heldout-i"); training resets use seeds >= N, so the
// split holds for any server that derives its episode from the seed.
#pragma once

#include "env/environment.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sao::env {

enum class OpenEnvTransport { kWebSocket, kHttp };

struct OpenEnvConfig {
  std::vector<std::string> urls;  // "http://host:port" (a path prefix is allowed)
  OpenEnvTransport transport = OpenEnvTransport::kWebSocket;
  std::string action_key = "message";
  std::string observation_key;  // "": the observation object as JSON text
  std::string success_key;      // "": success is a final reward > 0
  double invalid_action_reward = 0.0;
  int64_t heldout_size = 0;
  int64_t max_turns = 0;
  int64_t timeout_ms = 30000;  // per request: a step may run a tool or a sandbox
  int64_t startup_timeout_ms = 30000;
  int64_t max_reconnects = 100;
};

// One parsed reset/step reply.
struct OpenEnvReply {
  nlohmann::json observation;  // an object
  double reward = 0.0;         // null -> 0
  bool done = false;
};

// Checks a reset/step result (an HTTP 200 body, or the "data" of a
// WebSocket "observation" message): a JSON object (depth-limited) with
// "observation" (an object), "done" (a boolean) and "reward" (a number, a
// boolean, null or absent). Throws sao::Error "<where>: <problem>" quoting the
// offending part.
OpenEnvReply parse_openenv_reply(const std::string& body, const std::string& where);
OpenEnvReply parse_openenv_result(const nlohmann::json& reply, const std::string& where);
// The message of a 422 body ({"detail":[{"msg":...,"loc":[...]}...]} or
// {"detail":"..."}), for info.reason; the body itself (shortened) when it has
// another shape. Never throws.
std::string openenv_validation_message(const std::string& body);

class OpenEnvEnvironment final : public Environment {
 public:
  // Claims no server yet: the first reset() does.
  explicit OpenEnvEnvironment(OpenEnvConfig config);
  ~OpenEnvEnvironment() override;  // gives its server back
  OpenEnvEnvironment(const OpenEnvEnvironment&) = delete;
  OpenEnvEnvironment& operator=(const OpenEnvEnvironment&) = delete;

  EnvStep reset(uint64_t seed) override;
  EnvStep reset_heldout(int64_t index) override;
  EnvStep step(const std::string& action) override;
  // The one spelling of its name: registry, config section, name().
  static constexpr const char* kName = "openenv";
  std::string name() const override { return kName; }
  int64_t heldout_size() const override { return config_.heldout_size; }
  EnvLimits limits() const override;

  // The server's state of this object's episode (GET /state, or "state" over
  // the session); opens a session or claims a server when there is none.
  nlohmann::json state();

  const std::string& server_url() const { return url_; }  // "" before the first reset
  bool session_open() const;                              // websocket: the session's connection is open
  int64_t requests() const { return requests_; }
  int64_t timeouts() const { return timeouts_; }
  int64_t reconnects() const { return reconnects_; }
  // {"requests":..,"timeouts":..,"reconnects":..,"invalid_actions":..,"errors":..}
  nlohmann::json stats() const;

 private:
  struct Connection;  // the HTTP client of the server, and the session's WebSocket

  void choose_server();  // http: claims a free one; websocket: the next in turn
  void ensure_healthy();
  void ensure_session();  // a server chosen and healthy; websocket: the session open
  // Sends the request; returns (status, body). Transport failures and
  // timeouts throw (and make the next use wait for /health again).
  std::pair<int, std::string> request(const std::string& method, const std::string& path, const nlohmann::json* body);
  // websocket: sends one message and returns the answer's "data", checked to
  // be of `expected` type. An "error" answer throws, except VALIDATION_ERROR
  // when `validation` is given: that fills it and returns null.
  nlohmann::json exchange(const nlohmann::json& message, const std::string& expected, std::string* validation);
  EnvStep begin_episode(const nlohmann::json& request_body);
  EnvStep to_step(const OpenEnvReply& reply);
  EnvStep invalid_action(const std::string& reason);
  [[noreturn]] void fail(const std::string& what, const std::string& problem);

  OpenEnvConfig config_;
  std::string url_;
  std::unique_ptr<Connection> connection_;
  bool healthy_ = false;       // /health answered since the last failure
  bool ever_healthy_ = false;  // a later wait for /health is a reconnect
  bool session_was_open_ = false;
  bool episode_open_ = false;
  int64_t requests_ = 0;
  int64_t timeouts_ = 0;
  int64_t reconnects_ = 0;
  int64_t invalid_actions_ = 0;
  int64_t errors_ = 0;
};

OpenEnvConfig openenv_config_from_json(const nlohmann::json& config, const std::string& where);
std::unique_ptr<Environment> make_openenv_environment(const nlohmann::json& config, const std::string& where);

}  // namespace sao::env
