// OpenEnv environments over HTTP and over WebSocket sessions, against tests/openenv/guess_server.py (a
// stdlib server that follows OpenEnv's HTTPEnvServer wire format, error
// replies included, with a hand-written RFC 6455 /ws endpoint). Why each fault has its own case: a server is code the
// runtime does not control, and each way it can misbehave must become one
// clear, counted error (a lost episode) or, for an action the server refuses,
// a scored end of the episode, never a hang or a silent wrong reward.
#include "base/error.hpp"
#include "env/remote/openenv_env.hpp"
#include "test_openenv_server.hpp"
#include "test_process_helpers.hpp"

#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

using sao::env::OpenEnvConfig;
using sao::env::OpenEnvEnvironment;
using sao::env::OpenEnvTransport;
using sao_test::OpenEnvServer;

namespace {

OpenEnvConfig guess_config(const std::string& url,
                           sao::env::OpenEnvTransport transport = sao::env::OpenEnvTransport::kHttp) {
  OpenEnvConfig config;
  config.urls = {url};
  config.transport = transport;
  config.action_key = "guess";
  config.observation_key = "text";
  config.success_key = "won";
  config.heldout_size = 20;
  config.timeout_ms = 60000;
  config.startup_timeout_ms = 60000;
  return config;
}

// Binary search on "lo-hi?" with "higher"/"lower" answers; the final reward.
double play_binary_search(sao::env::Environment& env, sao::env::EnvStep step) {
  const std::string& prompt = step.observation;
  int lo = std::stoi(prompt.substr(0, prompt.find('-')));
  int hi = std::stoi(prompt.substr(prompt.find('-') + 1));
  while (!step.done()) {
    const int guess = (lo + hi) / 2;
    step = env.step(std::to_string(guess));
    if (step.observation == "higher") lo = guess + 1;
    if (step.observation == "lower") hi = guess - 1;
  }
  return step.reward;
}

}  // namespace

TEST_CASE("openenv: episodes over HTTP play to a scored end; held-out and training seeds are disjoint") {
  OpenEnvServer server;
  OpenEnvEnvironment env(guess_config(server.url()));
  CHECK(env.server_url().empty());  // no server is claimed before the first reset
  auto first = env.reset(0);
  CHECK(env.server_url() == server.url());
  CHECK(env.state()["episode_id"] == "sao-20");  // training seed 0 is server seed heldout_size + 0
  CHECK(first.reward == 0.0);
  CHECK_FALSE(first.done());
  // Binary search always wins within the guess budget.
  sao::env::EnvStep last;
  {
    auto step = first;
    const std::string& prompt = step.observation;
    int lo = std::stoi(prompt.substr(0, prompt.find('-')));
    int hi = std::stoi(prompt.substr(prompt.find('-') + 1));
    while (!step.done()) {
      const int guess = (lo + hi) / 2;
      step = env.step(std::to_string(guess));
      if (step.observation == "higher") lo = guess + 1;
      if (step.observation == "lower") hi = guess - 1;
    }
    last = step;
  }
  CHECK(last.observation == "correct");
  CHECK(last.reward == 1.0);
  CHECK(last.terminated);
  CHECK_FALSE(last.truncated);
  CHECK(last.info["accuracy"] == 1.0);
  CHECK(last.info["success"] == true);
  CHECK(env.state()["step_count"].get<int>() >= 1);
  CHECK_THROWS_WITH_AS(env.step("3"), doctest::Contains("after the episode ended"), sao::Error);

  // Held-out episode i is server seed i: the same episode every time.
  const auto heldout = env.reset_heldout(3);
  CHECK(env.state()["episode_id"] == "heldout-3");
  CHECK(env.reset_heldout(3).observation == heldout.observation);
  CHECK(play_binary_search(env, env.reset_heldout(3)) == 1.0);
  CHECK_THROWS_WITH_AS(env.reset_heldout(20), doctest::Contains("outside [0, 20)"), sao::Error);
  CHECK(env.reconnects() == 0);
  CHECK(env.timeouts() == 0);
  CHECK(env.stats()["errors"] == 0);
}

TEST_CASE("openenv: without observation_key the policy sees the observation object as JSON") {
  OpenEnvServer server;
  auto config = guess_config(server.url());
  config.observation_key = "";
  OpenEnvEnvironment env(config);
  const auto step = env.reset(7);
  const auto parsed = nlohmann::json::parse(step.observation);
  CHECK(parsed["won"] == false);
  CHECK(parsed["attempts_left"].is_number_integer());
  CHECK(parsed["text"].get<std::string>().back() == '?');
}

TEST_CASE("openenv: an action the server refuses (422) ends the episode with invalid_action_reward and the reason") {
  OpenEnvServer server;
  auto config = guess_config(server.url());
  config.action_key = "number";  // the server's Action model has "guess" and forbids extra fields
  config.invalid_action_reward = -0.5;
  OpenEnvEnvironment env(config);
  env.reset(1);
  const auto step = env.step("12");
  CHECK(step.terminated);
  CHECK(step.reward == -0.5);
  CHECK(step.info["success"] == false);
  CHECK(step.info["reason"] == "invalid action: body.action.guess: Field required (and 1 more)");
  CHECK(env.stats()["invalid_actions"] == 1);
  CHECK(env.stats()["errors"] == 0);  // the policy's mistake, not a broken environment
  CHECK_THROWS_WITH_AS(env.step("12"), doctest::Contains("after the episode ended"), sao::Error);
  CHECK_FALSE(env.reset(2).done());  // and the next episode starts as usual
}

TEST_CASE("openenv: with action_key \"\" the action text is the action object (a tool call)") {
  OpenEnvServer server;
  auto config = guess_config(server.url());
  config.action_key = "";
  OpenEnvEnvironment env(config);
  env.reset(4);
  const int64_t before = env.requests();
  const auto not_object = env.step("17");
  CHECK(not_object.terminated);
  CHECK(not_object.info["reason"] == "invalid action: a JSON number, not an object");
  CHECK(env.requests() == before);  // refused here, never sent
  env.reset(4);
  const auto not_json = env.step("{guess: 17}");
  CHECK(not_json.info["reason"].get<std::string>().find("invalid action: not JSON") == 0);
  env.reset(4);
  const auto sent = env.step(R"({"guess": "17"})");
  CHECK(sent.info.value("reason", "") == "");
  CHECK((sent.observation == "higher" || sent.observation == "lower" || sent.observation == "correct"));
  const auto wrong_type = env.step(R"({"guess": 17})");
  if (!sent.done())
    CHECK(wrong_type.info["reason"] == "invalid action: body.action.guess: Input should be a valid string");
}

TEST_CASE("openenv: each server fault is an error naming the server, the request and the problem") {
  const auto check = [](const std::string& fault, const std::string& problem) {
    CAPTURE(fault);
    OpenEnvServer server(fault);
    OpenEnvEnvironment env(guess_config(server.url()));
    env.reset(5);
    const std::string error = sao_test::error_of([&] { env.step("20"); });
    CHECK(error.find("openenv server " + server.url()) == 0);
    CHECK(error.find(problem) != std::string::npos);
    CHECK(env.stats()["errors"] == 1);
    // The episode is over; the next reset on the same server works.
    CHECK_THROWS_WITH_AS(env.step("20"), doctest::Contains("after the episode ended"), sao::Error);
    CHECK_FALSE(env.reset(6).done());
  };
  check("error_step", "POST /step: HTTP 500: Internal Server Error");
  check("bad_json_step", "POST /step: not valid JSON");
  check("no_done", "POST /step: the reply has no \"done\"");
}

TEST_CASE("openenv: a step that never answers times out, is counted, and the server is used again after /health") {
  OpenEnvServer server("hang_step");
  auto config = guess_config(server.url());
  config.timeout_ms = 300;  // the server never answers this step, however fast the machine
  OpenEnvEnvironment env(config);
  env.reset(5);
  CHECK_THROWS_WITH_AS(env.step("20"), doctest::Contains("no complete reply within timeout_ms = 300"), sao::Error);
  CHECK(env.timeouts() == 1);
  CHECK_FALSE(env.reset(6).done());  // /health answers (the server serves requests in threads)
  CHECK(env.reconnects() == 1);
}

TEST_CASE("openenv: a server that is down is an error after startup_timeout_ms; one that comes back is a reconnect") {
  {
    OpenEnvServer server("unhealthy");
    auto config = guess_config(server.url());
    config.startup_timeout_ms = 300;
    OpenEnvEnvironment env(config);
    const std::string error = sao_test::error_of([&] { env.reset(1); });
    CHECK(error.find("GET /health: not healthy within startup_timeout_ms = 300; last answer: HTTP 503") !=
          std::string::npos);
  }
  auto server = std::make_unique<OpenEnvServer>();
  const int port = server->port();
  auto config = guess_config(server->url());
  config.startup_timeout_ms = 300;
  config.max_reconnects = 1;
  OpenEnvEnvironment env(config);
  env.reset(1);
  server.reset();  // killed mid-episode
  const std::string error = sao_test::error_of([&] { env.step("20"); });
  CHECK(error.find("POST /step") != std::string::npos);
  const std::string down = sao_test::error_of([&] { env.reset(2); });
  CHECK(down.find("not healthy within startup_timeout_ms = 300") != std::string::npos);
  server = std::make_unique<OpenEnvServer>("none", port);  // back at the same address
  CHECK_FALSE(env.reset(2).done());
  CHECK(env.reconnects() == 1);
  server.reset();
  CHECK(sao_test::error_of([&] { env.step("20"); }).find("POST /step: request failed") != std::string::npos);
  server = std::make_unique<OpenEnvServer>("none", port);
  CHECK_THROWS_WITH_AS(env.reset(3), doctest::Contains("gave up after 1 reconnects (max_reconnects)"), sao::Error);
}

TEST_CASE("openenv: one server plays one episode at a time; a reset that finds none free says so") {
  OpenEnvServer server;
  const auto config = guess_config(server.url());
  auto first = std::make_unique<OpenEnvEnvironment>(config);
  OpenEnvEnvironment second(config);
  first->reset(1);
  CHECK_THROWS_WITH_AS(second.reset(2), doctest::Contains("all 1 server(s) in env.urls are playing other episodes"),
                       sao::Error);
  CHECK(second.server_url().empty());
  first.reset();  // destroying an environment gives its server back
  CHECK_FALSE(second.reset(2).done());
  CHECK(second.server_url() == server.url());
}

TEST_CASE("openenv: bad config is an error naming the key") {
  const auto error = [](const nlohmann::json& config) {
    return sao_test::error_of([&] { sao::env::openenv_config_from_json(config, "cfg.task"); });
  };
  CHECK(error(nlohmann::json::object()).find("cfg.task.url: missing") == 0);
  CHECK(error({{"url", "https://example.org"}}).find("https is not supported") != std::string::npos);
  CHECK(error({{"url", "ftp://example.org"}}) == "cfg.task.urls[0]: 'ftp://example.org' must start with http://");
  CHECK(error({{"url", "http://h:99999"}}) ==
        "cfg.task.urls[0]: 'http://h:99999' has port '99999', expected a number in [1, 65535]");
  CHECK(error({{"url", "http://:80"}}) == "cfg.task.urls[0]: 'http://:80' has no host");
  CHECK(error({{"url", "http://h:1"}, {"urls", {"http://h:2"}}}) == "cfg.task: set url or urls, not both");
  CHECK(error({{"urls", {"http://h:1", "http://h:1/"}}}) == "cfg.task.urls[1]: 'http://h:1' is listed twice");
  CHECK(error({{"url", "http://h:1"}, {"timeout_ms", 0}}) ==
        "cfg.task.timeout_ms: must be an integer in [1, 86400000], got 0");
  CHECK(error({{"url", "http://h:1"}, {"heldout_size", -1}}) ==
        "cfg.task.heldout_size: must be an integer in [0, 1000000], got -1");
  CHECK(error({{"url", "http://h:1"}, {"acton_key", "x"}}).find("acton_key") != std::string::npos);
  CHECK(error({{"url", "http://h:1"}, {"action_key", 3}}).find("action_key") != std::string::npos);
  const auto ok = sao::env::openenv_config_from_json({{"url", "http://10.0.0.2:8000/envs/guess/"}}, "cfg.task");
  CHECK(ok.urls == std::vector<std::string>{"http://10.0.0.2:8000/envs/guess"});
  CHECK(ok.action_key == "message");  // OpenEnv's echo and chat environments take {"message": text}
}

TEST_CASE("openenv: reply bodies are checked field by field") {
  using sao::env::parse_openenv_reply;
  const auto error = [](const std::string& body) {
    return sao_test::error_of([&] { parse_openenv_reply(body, "POST /step"); });
  };
  const auto ok = parse_openenv_reply(R"({"observation":{"text":"hi"},"reward":null,"done":false})", "POST /step");
  CHECK(ok.reward == 0.0);
  CHECK_FALSE(ok.done);
  CHECK(ok.observation["text"] == "hi");
  CHECK(parse_openenv_reply(R"({"observation":{},"done":true,"reward":-2.5})", "s").reward == -2.5);
  CHECK(parse_openenv_reply(R"({"observation":{},"done":true})", "s").reward == 0.0);
  CHECK(error("[1]") == "POST /step: the reply must be a JSON object, got array");
  CHECK(error(R"({"done":true})") == "POST /step: the reply has no \"observation\": '{\"done\":true}'");
  CHECK(error(R"({"observation":"text","done":true})") ==
        "POST /step: \"observation\" must be an object, got string '\"text\"'");
  CHECK(error(R"({"observation":{},"done":"yes"})") == "POST /step: \"done\" must be a boolean, got string '\"yes\"'");
  CHECK(error(R"({"observation":{},"done":true,"reward":"1"})") ==
        "POST /step: \"reward\" must be a number or null, got string '\"1\"'");
  CHECK(error("{\"observation\":" + std::string(300, '[')).find("nested deeper") != std::string::npos);
  CHECK(error("").find("not valid JSON") != std::string::npos);

  using sao::env::openenv_validation_message;
  CHECK(openenv_validation_message(R"({"detail":[{"loc":["body","action","code"],"msg":"Field required"}]})") ==
        "body.action.code: Field required");
  CHECK(openenv_validation_message(R"({"detail":"Missing action"})") == "Missing action");
  CHECK(openenv_validation_message("Unprocessable") == "Unprocessable");
  CHECK(openenv_validation_message(std::string("\xff\xfe")) == "\xEF\xBF\xBD\xEF\xBF\xBD");
}

// ---- the WebSocket session transport (OpenEnv's current one) ---------------

TEST_CASE("openenv websocket: sessions on one server play episodes side by side, each with its own environment") {
  OpenEnvServer server;
  const auto config = guess_config(server.url(), OpenEnvTransport::kWebSocket);
  OpenEnvEnvironment first(config);
  OpenEnvEnvironment second(config);
  const auto a = first.reset_heldout(1);
  const auto b = second.reset_heldout(2);
  CHECK(first.session_open());
  CHECK(second.session_open());
  // Interleaved steps do not disturb each other: each session has its own game.
  CHECK(first.state()["episode_id"] == "heldout-1");
  CHECK(second.state()["episode_id"] == "heldout-2");
  first.step("1");
  CHECK(first.state()["step_count"] == 1);
  CHECK(second.state()["step_count"] == 0);
  CHECK(play_binary_search(second, second.reset_heldout(2)) == 1.0);
  CHECK(play_binary_search(first, first.reset(9)) == 1.0);
  CHECK(first.state()["episode_id"] == "sao-29");
  CHECK(first.reset_heldout(1).observation == a.observation);
  CHECK(b.observation == second.reset_heldout(2).observation);
  CHECK(first.reconnects() == 0);
  CHECK(first.stats()["errors"] == 0);
}

TEST_CASE("openenv websocket: a VALIDATION_ERROR ends the episode with the reason; other errors name the code") {
  OpenEnvServer server;
  auto config = guess_config(server.url(), OpenEnvTransport::kWebSocket);
  config.action_key = "number";
  OpenEnvEnvironment env(config);
  env.reset(3);
  const auto step = env.step("12");
  CHECK(step.terminated);
  CHECK(step.info["reason"] == "invalid action: guess: Field required (and 1 more)");
  CHECK(env.stats()["errors"] == 0);
  CHECK(env.session_open());  // the session lives on
  CHECK_FALSE(env.reset(4).done());
}

TEST_CASE("openenv websocket: a full server says CAPACITY_REACHED with what to change") {
  OpenEnvServer server("none", 0, {"--max-sessions", "1"});
  const auto config = guess_config(server.url(), OpenEnvTransport::kWebSocket);
  OpenEnvEnvironment first(config);
  OpenEnvEnvironment second(config);
  first.reset(1);
  const std::string error = sao_test::error_of([&] { second.reset(2); });
  CHECK(error.find("openenv server " + server.url() +
                   ": \"reset\" over /ws: the server answered error "
                   "CAPACITY_REACHED") == 0);
  CHECK(error.find("max_concurrent_envs") != std::string::npos);
}

TEST_CASE("openenv websocket: a step that never answers times out; the session is reopened at the next reset") {
  OpenEnvServer server("ws_hang_step");
  auto config = guess_config(server.url(), OpenEnvTransport::kWebSocket);
  config.timeout_ms = 300;  // the server never answers this step, however fast the machine
  OpenEnvEnvironment env(config);
  env.reset(5);
  CHECK_THROWS_WITH_AS(env.step("20"), doctest::Contains("\"step\" over /ws: no answer within timeout_ms = 300"),
                       sao::Error);
  CHECK(env.timeouts() == 1);
  CHECK_FALSE(env.session_open());
  CHECK_FALSE(env.reset(6).done());
  CHECK(env.session_open());
  CHECK(env.reconnects() == 1);
}

TEST_CASE("openenv websocket: a session the server drops is an error, then a reconnect") {
  OpenEnvServer server("ws_drop_step");
  OpenEnvEnvironment env(guess_config(server.url(), OpenEnvTransport::kWebSocket));
  env.reset(5);
  const std::string error = sao_test::error_of([&] { env.step("20"); });
  CHECK(error.find("\"step\" over /ws: WebSocket: the server closed the connection") != std::string::npos);
  CHECK_FALSE(env.reset(6).done());
  CHECK(env.reconnects() == 1);
}

TEST_CASE("openenv websocket: a server without /ws is refused with a pointer to transport http") {
  OpenEnvServer server("no_ws");
  OpenEnvEnvironment env(guess_config(server.url(), OpenEnvTransport::kWebSocket));
  const std::string error = sao_test::error_of([&] { env.reset(1); });
  CHECK(error.find("openenv server " + server.url() + ": connect: WebSocket: cannot open 'ws://127.0.0.1:") == 0);
  CHECK(error.find("HTTP 404") != std::string::npos);
  CHECK(error.find("needs env.transport \"http\"") != std::string::npos);
}
