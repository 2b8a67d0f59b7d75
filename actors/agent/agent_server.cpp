// The agent endpoint's HTTP side; see agent_server.hpp.
#include "actors/agent/agent_server.hpp"

#include "actors/http/http_router.hpp"
#include "agent/openai_chat.hpp"
#include "base/constant_time.hpp"
#include "base/error.hpp"
#include "base/json_parse.hpp"
#include "base/utf8.hpp"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

namespace sao::actors {

namespace {
using Json = nlohmann::ordered_json;

std::string error_type(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 404:
      return "not_found_error";
    case 409:
      return "conflict_error";
    case 413:
      return "request_too_large";
    case 503:
    case 504:
      return "service_unavailable";
    default:
      return "invalid_request_error";
  }
}

// The API's error shape: {"error": {"message", "type", "code"}}.
void reply_api_error(httplib::Response& response, int status, const std::string& message) {
  response.status = status;
  const Json body = {{"error", {{"message", message}, {"type", error_type(status)}, {"code", nullptr}}}};
  response.set_content(base::dump_json(body), "application/json");
}

int status_of(const caf::error& error) {
  if (msg::has_code(error, msg::Errc::kAgentBadRequest)) return 400;
  if (msg::has_code(error, msg::Errc::kAgentNotFound)) return 404;
  if (msg::has_code(error, msg::Errc::kAgentConflict)) return 409;
  if (error == caf::sec::request_timeout) return 504;
  return 503;
}
}  // namespace

struct AgentServer::Impl {
  caf::actor_system& system;
  AgentActor agent;
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer;
  config::AgentSection config;
  config::RolloutSection rollout;
  std::string model_name;
  std::string token = http::random_token();
  std::string host;
  int port = 0;
  http::HttpRouter server;
  std::unique_ptr<net::EventHttpServer> front;
  std::filesystem::path endpoint_file;

  Impl(caf::actor_system& actor_system, AgentActor agent_actor, std::shared_ptr<const tokenizer::Tokenizer> shared,
       const config::RunConfig& run)
      : system(actor_system),
        agent(std::move(agent_actor)),
        tokenizer(std::move(shared)),
        config(run.agent),
        rollout(run.rollout),
        model_name(served_model_name(run)) {}

  // A call waits for a rollout slot (queue_timeout_s) and then its turn.
  std::chrono::seconds call_timeout() const {
    return std::chrono::seconds(config.queue_timeout_s + config.session_timeout_s);
  }

  // Asks the agent actor and waits on this HTTP worker; `on_value` fills
  // the reply, an error becomes the API's error with its status.
  template <class Result, class Request, class OnValue>
  void ask(httplib::Response& response, Request request, OnValue on_value) {
    caf::scoped_actor self{system};
    self->request(agent, call_timeout(), std::move(request))
        .receive([&](Result& value) { on_value(value); },
                 [&](const caf::error& error) {
                   auto text = msg::error_text(system, error);
                   if (error == caf::sec::request_timeout) text = "the run did not answer within the call timeout";
                   reply_api_error(response, status_of(error), text);
                 });
  }

  bool authorized(const httplib::Request& request, httplib::Response& response) const {
    const auto given = http::presented_token(request);
    if (given.empty()) {
      reply_api_error(response, 401,
                      "the agent endpoint needs the run's token (Authorization: Bearer TOKEN; see RUN_DIR/agent.json)");
      return false;
    }
    if (!base::constant_time_equal(given, token)) {
      reply_api_error(response, 401, "wrong token for this run's agent endpoint");
      return false;
    }
    return true;
  }

  // The request's settings the run's policy does not allow.
  void check_sampling(const agent::ChatRequest& request) const {
    const auto differs = [](double a, double b) { return std::abs(a - b) > 1e-9; };
    if (request.temperature && differs(*request.temperature, rollout.temperature)) {
      throw agent::RequestError(
          400, "temperature " + base::dump_json(*request.temperature) + " differs from the run's rollout.temperature " +
                   base::dump_json(rollout.temperature) + ": the tokens must be sampled from the policy being trained");
    }
    if (request.top_p && differs(*request.top_p, rollout.top_p)) {
      throw agent::RequestError(400, "top_p " + base::dump_json(*request.top_p) +
                                         " differs from the run's rollout.top_p " + base::dump_json(rollout.top_p) +
                                         ": the tokens must be sampled from the policy being trained");
    }
  }

  // The session a call belongs to: X-Session-Id, else "user".
  std::string session_of(const httplib::Request& http_request, const agent::ChatRequest& request) const {
    const auto header = http_request.get_header_value("X-Session-Id");
    if (!header.empty() && !request.user.empty() && header != request.user) {
      throw agent::RequestError(400, "X-Session-Id \"" + header + "\" and user \"" + request.user +
                                         "\" name different sessions; send one, or the same in both");
    }
    const auto session = header.empty() ? request.user : header;
    if (session.empty()) {
      throw agent::RequestError(400,
                                "a chat call needs its session: the X-Session-Id header or the \"user\" field (every "
                                "call of one episode carries the same id)");
    }
    agent::check_session_id(session, header.empty() ? "user" : "X-Session-Id");
    return session;
  }

  void chat(const httplib::Request& http_request, httplib::Response& response) {
    agent::ChatRequest request;
    std::string session;
    try {
      request = agent::parse_chat_request(http_request.body);
      check_sampling(request);
      session = session_of(http_request, request);
    } catch (const agent::RequestError& error) {
      reply_api_error(response, error.status, error.what());
      return;
    }
    msg::AgentCall call;
    call.session = session;
    call.messages = std::move(request.messages);
    call.tools_json = std::move(request.tools_json);
    // The run's turn budget bounds every turn; a reply cut by it says "length".
    call.max_tokens = request.max_tokens;
    ask<msg::AgentTurn>(response, std::move(call), [&](msg::AgentTurn& turn) {
      if (request.stream) {
        response.status = 200;
        response.set_content(agent::completion_stream(turn.result, request.logprobs, request.include_usage, *tokenizer),
                             "text/event-stream");
      } else {
        response.status = 200;
        response.set_content(base::dump_json(agent::completion_json(turn.result, request.logprobs, *tokenizer)),
                             "application/json");
      }
    });
  }

  void reward(const httplib::Request& http_request, httplib::Response& response) {
    msg::AgentReward request;
    try {
      request.session = http_request.matches[1].str();
      agent::check_session_id(request.session, "the episode id in the path");
      request.reward = agent::parse_reward_request(http_request.body);
    } catch (const agent::RequestError& error) {
      reply_api_error(response, error.status, error.what());
      return;
    }
    ask<msg::AgentRewardAck>(response, std::move(request), [&](msg::AgentRewardAck& ack) {
      response.status = 200;
      const Json body = {{"session", ack.session}, {"turns", ack.turns}, {"split", ack.held_out ? "test" : "train"}};
      response.set_content(base::dump_json(body), "application/json");
    });
  }

  void routes() {
    server.Get("/v1/models", [this](const httplib::Request& request, httplib::Response& response) {
      if (!authorized(request, response)) return;
      const Json body = {
          {"object", "list"},
          {"data", Json::array({{{"id", model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "sao"}}})}};
      response.set_content(base::dump_json(body), "application/json");
    });
    server.Post("/v1/chat/completions", [this](const httplib::Request& request, httplib::Response& response) {
      if (!authorized(request, response)) return;
      chat(request, response);
    });
    server.Post(R"(/v1/episodes/([^/]+)/reward)", [this](const httplib::Request& request, httplib::Response& response) {
      if (!authorized(request, response)) return;
      reward(request, response);
    });
    const auto unknown = [](const httplib::Request& request, httplib::Response& response) {
      reply_api_error(response, 404,
                      "no route " + request.method + " " + base::truncate_utf8(request.path, 200) +
                          " (the agent endpoint serves GET /v1/models, POST /v1/chat/completions and POST "
                          "/v1/episodes/{session}/reward)");
    };
    server.Get(".*", unknown);
    server.Post(".*", unknown);
    server.Put(".*", unknown);
    server.Delete(".*", unknown);
  }
};

AgentServer::AgentServer(caf::actor_system& system, AgentActor agent,
                         std::shared_ptr<const tokenizer::Tokenizer> tokenizer, const config::RunConfig& run)
    : impl_(std::make_unique<Impl>(system, std::move(agent), std::move(tokenizer), run)) {
  auto& impl = *impl_;
  impl.host = run.agent.listen;
  net::EventHttpLimits limits;
  limits.max_body_bytes = static_cast<size_t>(run.agent.max_body_bytes);
  limits.request_timeout_s = 60;
  // A call holds its worker until its turn is sampled: one worker per session that may be waiting.
  limits.worker_threads = static_cast<int>(run.agent.max_sessions) + 4;
  limits.max_connections = std::max(limits.max_connections, limits.worker_threads * 2);
  limits.max_connections_per_address = limits.max_connections;
  impl.server.set_payload_max_length(limits.max_body_bytes);
  impl.routes();
  impl.front = http::listen_or_fall_back(run.agent.listen, run.agent.port, "agent endpoint", "agent.listen", limits,
                                         impl.server);
  impl.port = impl.front->port();
  std::filesystem::create_directories(run.run.dir);
  impl.endpoint_file = std::filesystem::path(run.run.dir) / "agent.json";
  const nlohmann::json endpoint = {{"url", url()}, {"token", impl.token}, {"model", impl.model_name}};
  http::write_owner_only(impl.endpoint_file, base::dump_json(endpoint, 2) + "\n");
  std::fprintf(stderr, "agent endpoint: %s  token %s  model %s  (also in %s)\n", url().c_str(), impl.token.c_str(),
               impl.model_name.c_str(), impl.endpoint_file.c_str());
}

AgentServer::~AgentServer() {
  impl_->front.reset();
  std::error_code ignored;
  std::filesystem::remove(impl_->endpoint_file, ignored);  // the file only ever names a live endpoint
}

int AgentServer::port() const {
  return impl_->port;
}

std::string AgentServer::url() const {
  return "http://" + impl_->host + ":" + std::to_string(impl_->port) + "/v1";
}

const std::string& AgentServer::token() const {
  return impl_->token;
}

AgentEndpoint read_agent_endpoint(const std::string& run_dir) {
  const auto document = http::read_endpoint_file(run_dir, "agent.json", "agent.endpoint true");
  if (!document.contains("url") || !document["url"].is_string() || !document.contains("token") ||
      !document["token"].is_string()) {
    throw Error((std::filesystem::path(run_dir) / "agent.json").string() + ": expected {\"url\", \"token\"}");
  }
  return {document["url"].get<std::string>(), document["token"].get<std::string>()};
}

std::string served_model_name(const config::RunConfig& run) {
  if (!run.agent.model_name.empty()) return run.agent.model_name;
  if (!run.model_path.empty()) {
    auto name = std::filesystem::path(run.model_path).lexically_normal().filename().string();
    if (name.empty()) name = std::filesystem::path(run.model_path).lexically_normal().parent_path().filename().string();
    if (!name.empty()) return name;
  }
  return "sao";
}

}  // namespace sao::actors
