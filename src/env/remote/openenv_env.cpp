// OpenEnv HTTP environments; see openenv_env.hpp and docs/environments.md.
#include "env/remote/openenv_env.hpp"
#include "env/env_config.hpp"

#include "base/clock.hpp"
#include "base/error.hpp"
#include "base/json_parse.hpp"
#include "base/json_reader.hpp"
#include "base/utf8.hpp"
#include "env/remote/websocket_client.hpp"

// cpp-httplib is the HTTP client (and the console's server): a well-kept
// single-header library already in the stack; docs/decisions.md.
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <thread>

namespace sao::env {

namespace {
constexpr size_t kMaxReplyBytes = 16u << 20;  // an observation is text for a policy, not a data set
constexpr int64_t kHealthPollMs = 100;

// "http://host:port[/prefix]" split into the client's base and the path
// prefix. Throws sao::Error naming `where` for anything else.
struct ParsedUrl {
  std::string scheme_host_port;
  std::string prefix;
};

ParsedUrl parse_url(const std::string& url, const std::string& where) {
  const std::string scheme = "http://";
  if (url.rfind("https://", 0) == 0) {
    throw Error(where + ": '" + url +
                "': https is not supported (sao's HTTP client is built without TLS); reach the server over http "
                "on a private network or through a local TLS-terminating proxy");
  }
  if (url.rfind(scheme, 0) != 0) throw Error(where + ": '" + url + "' must start with http://");
  const std::string rest = url.substr(scheme.size());
  const auto slash = rest.find('/');
  const std::string authority = rest.substr(0, slash);
  std::string prefix = slash == std::string::npos ? "" : rest.substr(slash);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  const auto colon = authority.rfind(':');
  if (authority.empty() || colon == 0) throw Error(where + ": '" + url + "' has no host");
  if (colon != std::string::npos && authority.back() != ']') {
    const std::string port = authority.substr(colon + 1);
    const bool digits = !port.empty() && port.size() <= 5 && port.find_first_not_of("0123456789") == std::string::npos;
    if (!digits || std::stol(port) < 1 || std::stol(port) > 65535) {
      throw Error(where + ": '" + url + "' has port '" + port + "', expected a number in [1, 65535]");
    }
  }
  if (prefix.find_first_of("?# ") != std::string::npos) {
    throw Error(where + ": '" + url + "': the path may not hold a query, a fragment or a space");
  }
  return {scheme + authority, prefix};
}

// Which servers are in use, process-wide: one episode at a time each.
std::mutex& claims_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::map<std::string, bool>& claimed_urls() {
  static std::map<std::string, bool> claimed;
  return claimed;
}

std::string validation_message_of(const nlohmann::json& detail) {
  if (detail.is_string()) return detail.get<std::string>();
  if (detail.is_array() && !detail.empty() && detail[0].is_object()) {
    const auto& first = detail[0];
    std::string message =
        first.contains("msg") && first["msg"].is_string() ? first["msg"].get<std::string>() : base::dump_json(first);
    if (first.contains("loc") && first["loc"].is_array()) {
      std::string location;
      for (const auto& part : first["loc"]) {
        location += (location.empty() ? "" : ".") + (part.is_string() ? part.get<std::string>() : part.dump());
      }
      message = location + ": " + message;
    }
    if (detail.size() > 1) message += " (and " + std::to_string(detail.size() - 1) + " more)";
    return message;
  }
  return base::dump_json(detail);
}
}  // namespace

OpenEnvReply parse_openenv_reply(const std::string& body, const std::string& where) {
  return parse_openenv_result(base::parse_json_limited(body, where, base::kDefaultJsonMaxDepth, kMaxReplyBytes), where);
}

OpenEnvReply parse_openenv_result(const nlohmann::json& reply, const std::string& where) {
  if (!reply.is_object()) throw Error(where + ": the reply must be a JSON object, got " + reply.type_name());
  const std::string line = base::dump_json(reply);
  OpenEnvReply result;
  if (!reply.contains("observation"))
    throw Error(where + ": the reply has no \"observation\": " + base::quoted_excerpt(line));
  if (!reply["observation"].is_object()) {
    throw Error(where + ": \"observation\" must be an object, got " + reply["observation"].type_name() + " " +
                base::quoted_excerpt(base::dump_json(reply["observation"])));
  }
  result.observation = reply["observation"];
  if (!reply.contains("done")) throw Error(where + ": the reply has no \"done\": " + base::quoted_excerpt(line));
  if (!reply["done"].is_boolean()) {
    throw Error(where + ": \"done\" must be a boolean, got " + reply["done"].type_name() + " " +
                base::quoted_excerpt(base::dump_json(reply["done"])));
  }
  result.done = reply["done"].get<bool>();
  if (reply.contains("reward") && !reply["reward"].is_null()) {
    const auto& reward = reply["reward"];
    if (!reward.is_number() && !reward.is_boolean()) {
      throw Error(where + ": \"reward\" must be a number or null, got " + reward.type_name() + " " +
                  base::quoted_excerpt(base::dump_json(reward)));
    }
    // OpenEnv's Observation allows a boolean reward (bool | int | float | None).
    result.reward = reward.is_boolean() ? (reward.get<bool>() ? 1.0 : 0.0) : reward.get<double>();
    if (!std::isfinite(result.reward)) throw Error(where + ": \"reward\" is not finite");
  }
  return result;
}

std::string openenv_validation_message(const std::string& body) {
  try {
    const nlohmann::json reply =
        base::parse_json_limited(body, "422 reply", base::kDefaultJsonMaxDepth, kMaxReplyBytes);
    if (reply.is_object() && reply.contains("detail"))
      return base::truncate_utf8(validation_message_of(reply["detail"]), 300);
  } catch (const std::exception&) {
    // Not JSON: the body itself says what was wrong.
  }
  return base::truncate_utf8(base::replace_invalid_utf8(body), 300);
}

struct OpenEnvEnvironment::Connection {
  ParsedUrl url;
  httplib::Client client;
  WebSocketClient socket;  // websocket transport: the session
  Connection(ParsedUrl parsed, const std::string& peer)
      : url(std::move(parsed)), client(url.scheme_host_port), socket(peer) {}
  std::string websocket_url() const { return "ws://" + url.scheme_host_port.substr(7) + url.prefix + "/ws"; }
};

OpenEnvEnvironment::OpenEnvEnvironment(OpenEnvConfig config) : config_(std::move(config)) {}

OpenEnvEnvironment::~OpenEnvEnvironment() {
  if (connection_ && connection_->socket.is_open()) {
    try {
      connection_->socket.send_text(base::dump_json({{"type", "close"}}));
    } catch (...) {
      // The session ends with the connection anyway.
    }
  }
  connection_.reset();
  if (url_.empty() || config_.transport != OpenEnvTransport::kHttp) return;
  std::lock_guard<std::mutex> lock(claims_mutex());
  claimed_urls().erase(url_);
}

[[noreturn]] void OpenEnvEnvironment::fail(const std::string& what, const std::string& problem) {
  ++errors_;
  episode_open_ = false;
  throw Error("openenv server " + (url_.empty() ? std::string("(none)") : url_) + ": " + what + ": " + problem);
}

bool OpenEnvEnvironment::session_open() const {
  return connection_ && connection_->socket.is_open();
}

void OpenEnvEnvironment::choose_server() {
  if (!url_.empty()) return;
  if (config_.transport == OpenEnvTransport::kWebSocket) {
    // Sessions are independent: spread them over the servers in turn.
    static std::atomic<uint64_t> next{0};
    url_ = config_.urls[next.fetch_add(1) % config_.urls.size()];
  } else {
    std::lock_guard<std::mutex> lock(claims_mutex());
    auto& claimed = claimed_urls();
    for (const auto& url : config_.urls) {
      if (claimed.count(url)) continue;
      claimed[url] = true;
      url_ = url;
      break;
    }
    if (url_.empty()) {
      throw Error("openenv: all " + std::to_string(config_.urls.size()) +
                  " server(s) in env.urls are playing other episodes; an OpenEnv HTTP server holds one episode at "
                  "a time, so list one server per episode played at once (rollout.num_actors x "
                  "rollout.slots, and eval.batch_size) or lower those");
    }
  }
  connection_ = std::make_unique<Connection>(parse_url(url_, "env.urls"), "WebSocket");
  healthy_ = false;
}

void OpenEnvEnvironment::ensure_session() {
  choose_server();
  const bool websocket = config_.transport == OpenEnvTransport::kWebSocket;
  // A session that ended (the server closed it, or it failed) is opened
  // again only after /health: that counts as a reconnect.
  if (websocket && !connection_->socket.is_open() && session_was_open_) healthy_ = false;
  ensure_healthy();
  if (!websocket || connection_->socket.is_open()) return;
  try {
    connection_->socket.connect(connection_->websocket_url(), config_.timeout_ms);
  } catch (const Error& error) {
    healthy_ = false;
    fail("connect", std::string(error.what()) +
                        " (OpenEnv sessions need the server's /ws endpoint; a server that keeps one environment "
                        "behind plain HTTP needs env.transport \"http\")");
  }
  session_was_open_ = true;
}

nlohmann::json OpenEnvEnvironment::exchange(const nlohmann::json& message, const std::string& expected,
                                            std::string* validation) {
  const std::string what = "\"" + message["type"].get<std::string>() + "\" over /ws";
  auto& socket = connection_->socket;
  std::string text;
  ++requests_;
  bool answered = false;
  try {
    try {
      socket.send_text(base::dump_json(message));
    } catch (const Error& refused) {
      // A server that refuses a session (CAPACITY_REACHED) says why and
      // closes at once, often before the first request goes out: its message
      // is the answer worth reporting.
      std::string early;
      if (!socket.receive_text(early, 0) || early.find("\"error\"") == std::string::npos) throw;
      text = std::move(early);
      answered = true;
    }
    if (!answered) answered = socket.receive_text(text, config_.timeout_ms);
  } catch (const Error& error) {
    socket.abort();
    healthy_ = false;
    fail(what, error.what());
  }
  if (!answered) {
    socket.abort();  // a late answer would be taken for the next request's
    healthy_ = false;
    ++timeouts_;
    fail(what, "no answer within timeout_ms = " + std::to_string(config_.timeout_ms));
  }
  nlohmann::json answer;
  try {
    answer = base::parse_json_limited(text, what, base::kDefaultJsonMaxDepth, kMaxReplyBytes);
  } catch (const Error& error) {
    socket.abort();
    healthy_ = false;
    fail("answer", error.what());
  }
  if (!answer.is_object() || !answer.contains("type") || !answer["type"].is_string() || !answer.contains("data") ||
      !answer["data"].is_object()) {
    socket.abort();
    healthy_ = false;
    fail(what, "the answer must be {\"type\": string, \"data\": object}, got " +
                   base::quoted_excerpt(base::dump_json(answer)));
  }
  const std::string type = answer["type"].get<std::string>();
  const auto& data = answer["data"];
  if (type == "error") {
    const std::string code = data.contains("code") && data["code"].is_string() ? data["code"].get<std::string>() : "";
    std::string detail = data.contains("message") && data["message"].is_string() ? data["message"].get<std::string>()
                                                                                 : base::dump_json(data);
    if (code == "VALIDATION_ERROR" && validation) {
      if (data.contains("errors")) detail = validation_message_of(data["errors"]);
      *validation = base::truncate_utf8(detail, 300);
      return nullptr;
    }
    std::string problem = "the server answered error " + (code.empty() ? std::string("(no code)") : code) + ": " +
                          base::quoted_excerpt(detail, 300);
    if (code == "CAPACITY_REACHED") {
      problem +=
          "; the server holds at most max_concurrent_envs sessions: raise it, add servers to env.urls, or "
          "play fewer episodes at once (rollout.num_actors x rollout.slots, eval.batch_size)";
      socket.abort();
      healthy_ = false;
    }
    fail(what, problem);
  }
  if (type != expected) {
    fail(what, "expected an answer of type \"" + expected + "\", got \"" + base::truncate_utf8(type, 100) + "\"");
  }
  return data;
}

std::pair<int, std::string> OpenEnvEnvironment::request(const std::string& method, const std::string& path,
                                                        const nlohmann::json* body) {
  auto& client = connection_->client;
  const auto timeout = std::chrono::milliseconds(config_.timeout_ms);
  client.set_connection_timeout(timeout);
  client.set_read_timeout(timeout);
  client.set_write_timeout(timeout);
  httplib::Request request;
  request.method = method;
  request.path = connection_->url.prefix + path;
  if (body) {
    request.body = base::dump_json(*body);
    request.set_header("Content-Type", "application/json");
  }
  request.set_header("Accept", "application/json");
  std::string reply;
  bool too_long = false;
  request.content_receiver = [&](const char* data, size_t length, uint64_t, uint64_t) {
    if (reply.size() + length > kMaxReplyBytes) {
      too_long = true;
      return false;
    }
    reply.append(data, length);
    return true;
  };
  ++requests_;
  const std::string what = method + " " + path;
  const auto result = client.send(request);
  if (!result) {
    healthy_ = false;
    const auto error = result.error();
    if (too_long) fail(what, "the reply is longer than " + std::to_string(kMaxReplyBytes) + " bytes");
    if (error == httplib::Error::Read || error == httplib::Error::Write) {
      // httplib reports a missed deadline as a read or write error; the
      // connection is gone either way.
      ++timeouts_;
      fail(what, "no complete reply within timeout_ms = " + std::to_string(config_.timeout_ms) +
                     " (or the server closed the connection): " + httplib::to_string(error));
    }
    fail(what, "request failed: " + httplib::to_string(error));
  }
  return {result->status, reply};
}

void OpenEnvEnvironment::ensure_healthy() {
  if (healthy_) return;
  if (ever_healthy_) {
    if (reconnects_ >= config_.max_reconnects) {
      fail("GET /health", "gave up after " + std::to_string(reconnects_) + " reconnects (max_reconnects)");
    }
  }
  const int64_t deadline = base::steady_ms() + config_.startup_timeout_ms;
  std::string last_problem;
  while (true) {
    try {
      const auto [status, body] = request("GET", "/health", nullptr);
      nlohmann::json health;
      try {
        health = base::parse_json_limited(body, "/health");
      } catch (const std::exception&) {
      }
      if (status == 200 && health.is_object() && health.value("status", "") == "healthy") break;
      last_problem = "HTTP " + std::to_string(status) + " " + base::quoted_excerpt(base::replace_invalid_utf8(body));
    } catch (const Error& error) {
      --errors_;  // a failed poll is not yet an error of the run
      last_problem = error.what();
    }
    if (base::steady_ms() >= deadline) {
      fail("GET /health", "not healthy within startup_timeout_ms = " + std::to_string(config_.startup_timeout_ms) +
                              "; last answer: " + last_problem);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(kHealthPollMs));
  }
  if (ever_healthy_) ++reconnects_;
  ever_healthy_ = true;
  healthy_ = true;
}

EnvStep OpenEnvEnvironment::to_step(const OpenEnvReply& reply) {
  EnvStep step;
  if (config_.observation_key.empty()) {
    step.observation = base::dump_json(reply.observation);
  } else if (reply.observation.contains(config_.observation_key)) {
    const auto& value = reply.observation[config_.observation_key];
    step.observation = value.is_string() ? value.get<std::string>() : base::dump_json(value);
  } else {
    fail("reply", "the observation has no \"" + config_.observation_key +
                      "\" (env.observation_key): " + base::quoted_excerpt(base::dump_json(reply.observation)));
  }
  step.reward = reply.reward;
  step.terminated = reply.done;
  if (reply.done) {
    double success = reply.reward > 0.0 ? 1.0 : 0.0;
    if (!config_.success_key.empty()) {
      const auto it = reply.observation.find(config_.success_key);
      if (it == reply.observation.end() || !(it->is_boolean() || it->is_number())) {
        fail("reply", "the final observation's \"" + config_.success_key +
                          "\" (env.success_key) must be a boolean or a number: " +
                          base::quoted_excerpt(base::dump_json(reply.observation)));
      }
      success = it->is_boolean() ? (it->get<bool>() ? 1.0 : 0.0) : it->get<double>();
    }
    step.info["accuracy"] = success;
    step.info["success"] = success > 0.0;
  }
  episode_open_ = !reply.done;
  return step;
}

EnvStep OpenEnvEnvironment::invalid_action(const std::string& reason) {
  ++invalid_actions_;
  episode_open_ = false;
  EnvStep step;
  step.reward = config_.invalid_action_reward;
  step.terminated = true;
  step.info["accuracy"] = 0.0;
  step.info["success"] = false;
  step.info["reason"] = "invalid action: " + reason;
  return step;
}

EnvStep OpenEnvEnvironment::begin_episode(const nlohmann::json& request_body) {
  episode_open_ = false;
  ensure_session();
  OpenEnvReply reply;
  if (config_.transport == OpenEnvTransport::kWebSocket) {
    const auto data = exchange({{"type", "reset"}, {"data", request_body}}, "observation", nullptr);
    try {
      reply = parse_openenv_result(data, "\"reset\" over /ws");
    } catch (const Error& error) {
      fail("answer", error.what());
    }
  } else {
    const auto [status, body] = request("POST", "/reset", &request_body);
    if (status != 200) {
      fail("POST /reset", "HTTP " + std::to_string(status) + ": " + openenv_validation_message(body));
    }
    try {
      reply = parse_openenv_reply(body, "POST /reset");
    } catch (const Error& error) {
      fail("reply", error.what());
    }
  }
  if (reply.done) fail("reset", "the episode is over at reset (\"done\": true)");
  auto step = to_step(reply);
  // Keyed by the seed the server got: training seeds start at heldout_size,
  // so a training key never equals a held-out one.
  step.info["episode_key"] = "seed-" + base::dump_json(request_body["seed"]);
  return step;
}

EnvStep OpenEnvEnvironment::reset(uint64_t seed) {
  // Seeds stay below 2^53 so a JavaScript server reads them exactly, and at or
  // above heldout_size so no training episode is a held-out one.
  constexpr uint64_t kSeedSpan = (uint64_t{1} << 53);
  const uint64_t heldout = static_cast<uint64_t>(config_.heldout_size);
  const uint64_t server_seed = heldout + seed % (kSeedSpan - heldout);
  return begin_episode({{"seed", server_seed}, {"episode_id", "sao-" + std::to_string(server_seed)}});
}

EnvStep OpenEnvEnvironment::reset_heldout(int64_t index) {
  if (index < 0 || index >= config_.heldout_size) {
    throw Error("openenv: held-out index " + std::to_string(index) + " outside [0, " +
                std::to_string(config_.heldout_size) + ") (env.heldout_size)");
  }
  return begin_episode({{"seed", index}, {"episode_id", "heldout-" + std::to_string(index)}});
}

EnvStep OpenEnvEnvironment::step(const std::string& action) {
  if (!episode_open_) throw Error("openenv: step() called before reset() or after the episode ended");
  nlohmann::json action_object;
  if (config_.action_key.empty()) {
    try {
      action_object = base::parse_json_limited(action, "action text");
    } catch (const std::exception& error) {
      return invalid_action(std::string("not JSON (env.action_key is \"\", so the action must be a JSON object): ") +
                            error.what());
    }
    if (!action_object.is_object()) {
      return invalid_action(std::string("a JSON ") + action_object.type_name() + ", not an object");
    }
  } else {
    action_object = {{config_.action_key, action}};
  }
  ensure_session();
  OpenEnvReply reply;
  if (config_.transport == OpenEnvTransport::kWebSocket) {
    std::string validation;
    const auto data = exchange({{"type", "step"}, {"data", action_object}}, "observation", &validation);
    if (data.is_null()) return invalid_action(validation);
    try {
      reply = parse_openenv_result(data, "\"step\" over /ws");
    } catch (const Error& error) {
      fail("answer", error.what());
    }
  } else {
    const nlohmann::json request_body = {{"action", action_object}};
    const auto [status, body] = request("POST", "/step", &request_body);
    if (status == 422) return invalid_action(openenv_validation_message(body));
    if (status != 200) fail("POST /step", "HTTP " + std::to_string(status) + ": " + openenv_validation_message(body));
    try {
      reply = parse_openenv_reply(body, "POST /step");
    } catch (const Error& error) {
      fail("reply", error.what());
    }
  }
  return to_step(reply);
}

nlohmann::json OpenEnvEnvironment::state() {
  ensure_session();
  if (config_.transport == OpenEnvTransport::kWebSocket) return exchange({{"type", "state"}}, "state", nullptr);
  const auto [status, body] = request("GET", "/state", nullptr);
  if (status != 200) fail("GET /state", "HTTP " + std::to_string(status) + ": " + openenv_validation_message(body));
  nlohmann::json state;
  try {
    state = base::parse_json_limited(body, "GET /state", base::kDefaultJsonMaxDepth, kMaxReplyBytes);
  } catch (const Error& error) {
    fail("reply", error.what());
  }
  if (!state.is_object()) fail("GET /state", std::string("the reply must be a JSON object, got ") + state.type_name());
  return state;
}

EnvLimits OpenEnvEnvironment::limits() const {
  EnvLimits limits;
  limits.max_turns = config_.max_turns;
  return limits;
}

nlohmann::json OpenEnvEnvironment::stats() const {
  return {{"requests", requests_},
          {"timeouts", timeouts_},
          {"reconnects", reconnects_},
          {"invalid_actions", invalid_actions_},
          {"errors", errors_}};
}

OpenEnvConfig openenv_config_from_json(const nlohmann::json& config, const std::string& where) {
  OpenEnvConfig result;
  base::JsonReader reader(config, where);
  read_env_name(reader, OpenEnvEnvironment::kName, where);
  std::string url;
  reader.read("url", url);
  reader.read("urls", result.urls);
  std::string transport = "websocket";
  reader.read("transport", transport);
  reader.read("action_key", result.action_key);
  reader.read("observation_key", result.observation_key);
  reader.read("success_key", result.success_key);
  reader.read("invalid_action_reward", result.invalid_action_reward, base::RealRange{-1e6, 1e6});
  reader.read("heldout_size", result.heldout_size, base::IntRange{0, 1000000});
  reader.read("max_turns", result.max_turns, base::IntRange{0, 1 << 20});
  reader.read("timeout_ms", result.timeout_ms, base::IntRange{1, 86400000});
  reader.read("startup_timeout_ms", result.startup_timeout_ms, base::IntRange{1, 86400000});
  reader.read("max_reconnects", result.max_reconnects, base::IntRange{0, 1 << 30});
  reader.reject_unknown_keys();
  if (transport == "http") {
    result.transport = OpenEnvTransport::kHttp;
  } else if (transport != "websocket") {
    throw Error(where +
                ".transport: expected \"websocket\" (sessions over /ws) or \"http\" (one environment per "
                "server over plain HTTP), got \"" +
                transport + "\"");
  }
  if (!url.empty() && !result.urls.empty()) throw Error(where + ": set url or urls, not both");
  if (!url.empty()) result.urls = {url};
  if (result.urls.empty()) {
    throw Error(where + ".url: missing: the OpenEnv server's address, e.g. \"http://127.0.0.1:8000\" (or urls: [...])");
  }
  for (size_t i = 0; i < result.urls.size(); ++i) {
    auto& entry = result.urls[i];
    while (!entry.empty() && entry.back() == '/') entry.pop_back();
    parse_url(entry, where + ".urls[" + std::to_string(i) + "]");
    for (size_t j = 0; j < i; ++j) {
      if (result.urls[j] == entry) {
        throw Error(where + ".urls[" + std::to_string(i) + "]: '" + entry + "' is listed twice");
      }
    }
  }
  return result;
}

std::unique_ptr<Environment> make_openenv_environment(const nlohmann::json& config, const std::string& where) {
  return std::make_unique<OpenEnvEnvironment>(openenv_config_from_json(config, where));
}

}  // namespace sao::env
