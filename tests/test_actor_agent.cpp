// The agent endpoint end to end inside one actor system: an HTTP client per
// session (threads, concurrently) drives a rollout actor through the agent
// actor and the real HTTP server, with a tiny chat template that lists tools
// and renders tool turns. What must hold: the trajectories replay receives
// hold exactly the ids and log-probs the endpoint returned, with the
// agent's per-turn rewards on each turn's last token; an edited history is
// refused (409) and counted; a held-out episode is scored, not trained on;
// a missing or wrong token is 401; bad bodies get 4xx with the reason; a
// session past rollout.max_turns is cut (400 on the call that found it) and
// trained on as truncated; an abandoned session is a lost episode.
#include "actors/agent/agent_actor.hpp"
#include "actors/agent/agent_server.hpp"
#include "actors/protocol.hpp"
#include "actors/run/rollout_actor.hpp"
#include "actors/run/weight_sync_actor.hpp"
#include "model/tensor_blob.hpp"
#include "test_tiny_model.hpp"
#include "test_tiny_tokenizer.hpp"
#include "tokenizer/chat_tokenizer.hpp"
#include "weights/packet.hpp"

#include <doctest/doctest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// How long an event may take before the test calls it a hang. Not a speed
// requirement: an event that arrives at all arrives long before this.
constexpr auto kHangGuard = 120s;

const std::string kTemplate =
    "{% if tools %}tools:{% for t in tools %}{{ t.function.name }};{% endfor %}<|special|>\n{% endif %}"
    "{% for m in messages %}{% if m.role == 'tool' %}user:<r>{{ m.content }}</r>"
    "{% else %}{{ m.role }}:{{ m.content }}{% endif %}<|special|>\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}";

std::shared_ptr<const sao::tokenizer::Tokenizer> chat_tokenizer() {
  auto hf = std::make_shared<const sao::tokenizer::HfTokenizer>(sao::tokenizer::HfTokenizer::from_json_text(
      sao_test::byte_level_json().dump(), R"({"eos_token": "<|special|>"})", "tiny"));
  return std::make_shared<const sao::tokenizer::ChatTokenizer>(
      hf, sao::tokenizer::ChatTemplate::parse(kTemplate, "tiny"), "tiny");
}

sao::model::ModelConfig chat_model() {
  auto config = sao_test::tiny_byte_model();
  config.vocab_size = 302;  // the tiny tokenizer's ids
  config.max_position_embeddings = 256;
  return config;
}

// One actor system with a weight-sync actor, the agent actor and its HTTP
// server, a rollout whose env is the agent, and a scoped actor as replay.
struct AgentRig {
  caf::actor_system_config system_config;
  std::unique_ptr<caf::actor_system> system;
  std::unique_ptr<caf::scoped_actor> replay;
  std::unique_ptr<caf::scoped_actor> coordinator;
  sao::actors::WeightSyncActor weight_sync;
  sao::actors::AgentActor agent;
  sao::actors::RolloutActor rollout;
  std::unique_ptr<sao::actors::AgentServer> server;
  sao::actors::RolloutActorConfig rollout_config;
  fs::path run_dir;

  AgentRig(int64_t max_turns, int64_t session_timeout_ms) {
    sao::actors::register_protocol(system_config);
    system = std::make_unique<caf::actor_system>(system_config);
    replay = std::make_unique<caf::scoped_actor>(*system);
    coordinator = std::make_unique<caf::scoped_actor>(*system);
    run_dir = fs::temp_directory_path() / ("sao_test_agent_" + std::to_string(::getpid()));
    fs::remove_all(run_dir);
    const auto tokenizer = chat_tokenizer();
    weight_sync = sao::actors::spawn_weight_sync_actor(*system);
    sao::model::CausalLM policy(chat_model());
    sao::model::init_weights(*policy, 3);
    (*coordinator)->send(weight_sync, sao::weights::host_packet(0, sao::model::pack_module(*policy)));
    sao::actors::AgentActorConfig agent_config;
    agent_config.model_name = "tiny";
    agent_config.session_timeout_ms = session_timeout_ms;
    agent = sao::actors::spawn_agent_actor(*system, agent_config);
    sao::config::RunConfig run;
    run.run.dir = run_dir.string();
    run.agent.endpoint = true;
    run.agent.port = 0;
    run.agent.max_body_bytes = 4096;
    run.agent.max_sessions = 16;
    run.agent.model_name = "tiny";
    run.rollout.temperature = 1.0;
    server = std::make_unique<sao::actors::AgentServer>(*system, agent, tokenizer, run);
    auto& config = rollout_config;
    config.name = "rollout-0";
    config.model = chat_model();
    config.tokenizer = tokenizer;
    config.rollout.slots = 4;
    config.rollout.max_new_tokens = 6;
    config.rollout.max_turns = max_turns;
    config.env = agent;
    config.env_is_agent_endpoint = true;
    config.replay = caf::actor_cast<sao::actors::ReplayActor>(*replay);
    config.weight_sync = weight_sync;
    config.coordinator = caf::actor_cast<sao::actors::CoordinatorActor>(*coordinator);
    rollout = sao::actors::spawn_rollout_actor(*system, config);
  }
  ~AgentRig() {
    server.reset();
    for (const auto& actor : {rollout.address(), agent.address(), weight_sync.address()})
      caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
    fs::remove_all(run_dir);
  }

  httplib::Result post(const std::string& path, const Json& body, const std::string& session = "",
                       const std::string& token_override = "\x01") const {
    httplib::Client client("127.0.0.1", server->port());
    client.set_read_timeout(120, 0);
    httplib::Headers headers;
    const auto token = token_override == "\x01" ? server->token() : token_override;
    if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
    if (!session.empty()) headers.emplace("X-Session-Id", session);
    return client.Post(("/v1" + path).c_str(), headers, body.dump(), "application/json");
  }

  // Trajectories replay receives until `count` have come.
  std::vector<sao::algo::Trajectory> trajectories(size_t count) {
    std::vector<sao::algo::Trajectory> received;
    bool timed_out = false;
    while (received.size() < count && !timed_out) {
      (*replay)->receive(
          [&](const sao::algo::Trajectory& trajectory) -> sao::msg::ReplayAck {
            received.push_back(trajectory);
            return {true, 0, false, 64, true};
          },
          caf::after(kHangGuard) >> [&] { timed_out = true; });
    }
    REQUIRE_FALSE(timed_out);
    return received;
  }

  // A number from an actor's status.
  template <class Handle>
  double status_number(const Handle& actor, const std::string& key) {
    double value = -1;
    (*coordinator)
        ->request(actor, kHangGuard, sao::atoms::status_atom_v)
        .receive([&](const sao::msg::ActorStatus& status) { value = status.numbers.at(key); },
                 [&](const caf::error&) { FAIL("no status"); });
    return value;
  }
  // An actor's status number once it reaches `at_least`: waited for as an
  // event (the bound of 2 minutes only guards against a hang).
  template <class Handle>
  double await_status(const Handle& actor, const std::string& key, double at_least) {
    for (int i = 0; i < 12000 && status_number(actor, key) < at_least; ++i) std::this_thread::sleep_for(10ms);
    return status_number(actor, key);
  }
};

const Json kTools = Json::array({{{"type", "function"}, {"function", {{"name", "calc"}}}}});

Json first_messages(const std::string& question) {
  return Json::array({{{"role", "system"}, {"content", "be brief"}}, {{"role", "user"}, {"content", question}}});
}

// What a session saw of one turn.
struct SeenTurn {
  std::vector<int64_t> ids;
  std::vector<float> logprobs;
  std::vector<int64_t> versions;
};

std::vector<int64_t> action_ids(const sao::algo::Trajectory& trajectory) {
  std::vector<int64_t> ids;
  for (size_t i = 0; i < trajectory.tokens.size(); ++i)
    if (trajectory.action_mask[i]) ids.push_back(trajectory.tokens[i]);
  return ids;
}

}  // namespace

TEST_CASE("agent sessions become trajectories of exactly the ids and log-probs the endpoint returned") {
  AgentRig rig(/*max_turns=*/4, /*session_timeout_ms=*/600000);
  constexpr int kSessions = 3;
  std::mutex mutex;
  std::map<std::string, std::vector<SeenTurn>> seen;
  std::vector<std::string> failures;
  std::vector<std::thread> agents;
  // Joined however the test ends (a failed REQUIRE throws past the joins below).
  struct Joiner {
    std::vector<std::thread>& threads;
    ~Joiner() {
      for (auto& thread : threads)
        if (thread.joinable()) thread.join();
    }
  } joiner{agents};
  for (int i = 0; i < kSessions; ++i) {
    agents.emplace_back([&, i] {
      const std::string session = "s" + std::to_string(i);
      auto fail = [&](const std::string& what) {
        std::lock_guard<std::mutex> lock(mutex);
        failures.push_back(session + ": " + what);
      };
      Json messages = first_messages("q" + std::to_string(i));
      std::vector<SeenTurn> turns;
      for (int turn = 0; turn < 2; ++turn) {
        const auto reply =
            rig.post("/chat/completions",
                     {{"model", "tiny"}, {"messages", messages}, {"tools", kTools}, {"logprobs", true}}, session);
        if (!reply || reply->status != 200) return fail("turn " + std::to_string(turn) + " failed");
        const auto body = Json::parse(reply->body);
        SeenTurn seen_turn;
        seen_turn.ids = body["sao"]["token_ids"].get<std::vector<int64_t>>();
        seen_turn.logprobs = body["sao"]["logprobs"].get<std::vector<float>>();
        seen_turn.versions = body["sao"]["policy_versions"].get<std::vector<int64_t>>();
        // The logprobs field of the API carries the same numbers.
        const auto& content = body["choices"][0]["logprobs"]["content"];
        if (content.size() != seen_turn.logprobs.size()) return fail("logprobs.content has another length");
        for (size_t t = 0; t < content.size(); ++t)
          if (content[t]["logprob"].get<float>() != seen_turn.logprobs[t]) return fail("logprobs.content differs");
        turns.push_back(seen_turn);
        messages.push_back(body["choices"][0]["message"]);  // echoed as received
        messages.push_back({{"role", "tool"}, {"tool_call_id", "c"}, {"content", std::to_string(4 + i)}});
      }
      // The last tool message was never answered: the episode ends on the agent's reward instead.
      const auto reward = rig.post("/episodes/" + session + "/reward", {{"rewards", {0.5, 1.0}}});
      if (!reward || reward->status != 200) return fail("reward failed");
      if (Json::parse(reward->body)["turns"] != 2) return fail("reward saw another number of turns");
      std::lock_guard<std::mutex> lock(mutex);
      seen[session] = turns;
    });
  }
  const auto received = rig.trajectories(kSessions);
  for (auto& agent : agents) agent.join();
  REQUIRE(failures.empty());
  REQUIRE(seen.size() == kSessions);
  // Each trajectory is one session's: its action ids are the session's turns, in order.
  int matched = 0;
  for (const auto& trajectory : received) {
    for (const auto& [session, turns] : seen) {
      std::vector<int64_t> ids;
      std::vector<float> logprobs;
      std::vector<int64_t> versions;
      for (const auto& turn : turns) {
        ids.insert(ids.end(), turn.ids.begin(), turn.ids.end());
        logprobs.insert(logprobs.end(), turn.logprobs.begin(), turn.logprobs.end());
        versions.insert(versions.end(), turn.versions.begin(), turn.versions.end());
      }
      if (action_ids(trajectory) != ids) continue;
      ++matched;
      std::vector<float> trained_logprobs;
      std::vector<int64_t> trained_versions;
      std::vector<float> rewards;
      for (size_t t = 0; t < trajectory.tokens.size(); ++t) {
        if (!trajectory.action_mask[t]) continue;
        trained_logprobs.push_back(trajectory.behaviour_logprobs[t]);
        trained_versions.push_back(trajectory.policy_versions[t]);
        rewards.push_back(trajectory.rewards[t]);
      }
      CHECK(trained_logprobs == logprobs);
      CHECK(trained_versions == versions);
      // The agent's per-turn rewards on each turn's last action token.
      std::vector<float> expected_rewards(ids.size(), 0.0F);
      expected_rewards[turns[0].ids.size() - 1] = 0.5F;
      expected_rewards.back() = 1.0F;
      CHECK(rewards == expected_rewards);
      CHECK(trajectory.terminated);
      CHECK(trajectory.origin.turns == 2);
      // The prompt is the template's rendering of the system and user messages with the tools.
      const auto prompt = chat_tokenizer()->first_turn_messages({{"system", "be brief"},
                                                                 {"user", session == "s0"   ? "q0"
                                                                          : session == "s1" ? "q1"
                                                                                            : "q2"}},
                                                                kTools.dump(), "test");
      CHECK(std::vector<int64_t>(trajectory.tokens.begin(),
                                 trajectory.tokens.begin() + static_cast<std::ptrdiff_t>(prompt.size())) == prompt);
    }
  }
  CHECK(matched == kSessions);
  CHECK(rig.status_number(rig.agent, "episodes_rewarded") == kSessions);
  CHECK(rig.status_number(rig.agent, "turns_served") == 2 * kSessions);
}

TEST_CASE("the endpoint refuses edited history, bad tokens and bad bodies, and scores held-out episodes") {
  AgentRig rig(/*max_turns=*/4, /*session_timeout_ms=*/600000);
  const auto first = rig.post("/chat/completions", {{"messages", first_messages("q")}}, "held");
  REQUIRE(first);
  REQUIRE(first->status == 200);
  const auto reply = Json::parse(first->body);
  auto edited = first_messages("q");
  auto assistant = reply["choices"][0]["message"];
  assistant["content"] = assistant["content"].get<std::string>() + " (edited)";
  edited.push_back(assistant);
  edited.push_back({{"role", "user"}, {"content", "more"}});
  const auto refused = rig.post("/chat/completions", {{"messages", edited}}, "held");
  REQUIRE(refused);
  CHECK(refused->status == 409);
  CHECK(Json::parse(refused->body)["error"]["message"].get<std::string>().find(
            "messages[2] differs from what the session recorded: content differs") != std::string::npos);
  CHECK(rig.status_number(rig.agent, "history_mismatches") == 1);
  // An assistant message the policy never wrote is not an observation either.
  auto forged = first_messages("q");
  forged.push_back(reply["choices"][0]["message"]);
  forged.push_back({{"role", "assistant"}, {"content", "I wrote this"}});
  const auto forged_reply = rig.post("/chat/completions", {{"messages", forged}}, "held");
  REQUIRE(forged_reply);
  CHECK(forged_reply->status == 400);

  // The session goes on after a refusal: it is scored as held out, never sent to replay.
  const auto scored = rig.post("/episodes/held/reward", {{"reward", 1.0}, {"split", "test"}});
  REQUIRE(scored);
  CHECK(scored->status == 200);
  CHECK(Json::parse(scored->body)["split"] == "test");
  CHECK(rig.status_number(rig.agent, "heldout_episodes") == 1);
  CHECK(rig.status_number(rig.agent, "heldout_success_rate") == 1.0);
  // The rollout counts it held out (and so never sends it); wait for that event.
  CHECK(rig.await_status(rig.rollout, "episodes_held_out", 1) == 1);
  CHECK(rig.status_number(rig.rollout, "episodes_done") == 0);
  const auto again = rig.post("/episodes/held/reward", {{"reward", 1.0}});
  REQUIRE(again);
  CHECK(again->status == 404);

  const Json one_message = {{"messages", first_messages("q")}};
  const auto missing = rig.post("/chat/completions", one_message, "x", "");
  REQUIRE(missing);
  CHECK(missing->status == 401);
  const auto wrong = rig.post("/chat/completions", one_message, "x", "not-the-token");
  REQUIRE(wrong);
  CHECK(wrong->status == 401);
  CHECK(Json::parse(wrong->body)["error"]["type"] == "authentication_error");
  httplib::Client client("127.0.0.1", rig.server->port());
  const httplib::Headers auth = {{"Authorization", "Bearer " + rig.server->token()}, {"X-Session-Id", "x"}};
  const auto malformed = client.Post("/v1/chat/completions", auth, "{\"messages\": [", "application/json");
  REQUIRE(malformed);
  CHECK(malformed->status == 400);
  CHECK(Json::parse(malformed->body)["error"]["message"].get<std::string>().rfind("the request body: not valid JSON",
                                                                                  0) == 0);
  const auto oversized =
      client.Post("/v1/chat/completions", auth, "{\"pad\": \"" + std::string(5000, 'a') + "\"}", "application/json");
  REQUIRE(oversized);
  CHECK(oversized->status == 413);
  const auto unknown = rig.post("/chat/completions", {{"messages", first_messages("q")}, {"logit_bias", {}}}, "x");
  REQUIRE(unknown);
  CHECK(unknown->status == 400);
  CHECK(Json::parse(unknown->body)["error"]["message"] == "unknown field 'logit_bias'");
  const auto no_session = rig.post("/chat/completions", one_message);
  REQUIRE(no_session);
  CHECK(no_session->status == 400);
  const auto hot = rig.post("/chat/completions", {{"messages", first_messages("q")}, {"temperature", 0.2}}, "x");
  REQUIRE(hot);
  CHECK(hot->status == 400);
  CHECK(Json::parse(hot->body)["error"]["message"] ==
        "temperature 0.2 differs from the run's rollout.temperature 1.0: the tokens must be sampled from the policy "
        "being trained");
  const auto models = client.Get("/v1/models", auth);
  REQUIRE(models);
  CHECK(Json::parse(models->body)["data"][0]["id"] == "tiny");
  const auto nowhere = client.Get("/v2/anything", auth);
  REQUIRE(nowhere);
  CHECK(nowhere->status == 404);
  // The endpoint file names the live endpoint.
  const auto endpoint = sao::actors::read_agent_endpoint(rig.run_dir.string());
  CHECK(endpoint.token == rig.server->token());
}

TEST_CASE("a session past rollout.max_turns is cut: its call gets 400, its turns are trained on as truncated") {
  AgentRig rig(/*max_turns=*/2, /*session_timeout_ms=*/600000);
  auto messages = first_messages("q");
  for (int turn = 0; turn < 2; ++turn) {
    const auto reply = rig.post("/chat/completions", {{"messages", messages}}, "long");
    REQUIRE(reply);
    REQUIRE(reply->status == 200);
    messages.push_back(Json::parse(reply->body)["choices"][0]["message"]);
    messages.push_back({{"role", "user"}, {"content", "go on"}});
  }
  const auto cut = rig.post("/chat/completions", {{"messages", messages}}, "long");
  REQUIRE(cut);
  CHECK(cut->status == 400);
  CHECK(Json::parse(cut->body)["error"]["message"] ==
        "session long ended before this turn: the episode reached rollout.max_turns (2); what was sampled so far was "
        "trained on as a truncated episode");
  const auto trajectories = rig.trajectories(1);
  CHECK(trajectories[0].truncated);
  CHECK(trajectories[0].origin.turns == 2);
  CHECK(rig.status_number(rig.agent, "sessions_cut_short") == 1);
}

TEST_CASE("a rollout that stops takes its sessions with it, and its slots never swallow a new session") {
  AgentRig rig(/*max_turns=*/4, /*session_timeout_ms=*/600000);
  const auto started = rig.post("/chat/completions", {{"messages", first_messages("q")}}, "before");
  REQUIRE(started);
  REQUIRE(started->status == 200);
  caf::anon_send_exit(rig.rollout, caf::exit_reason::kill);
  // The agent actor hears of it.
  CHECK(rig.await_status(rig.agent, "sessions_lost_with_rollout", 1) == 1);
  CHECK(rig.status_number(rig.agent, "free_slots") == 0);
  const auto late = rig.post("/episodes/before/reward", {{"reward", 1.0}});
  REQUIRE(late);
  CHECK(late->status == 404);
  // A restarted rollout serves the next session.
  rig.rollout = sao::actors::spawn_rollout_actor(*rig.system, rig.rollout_config);
  const auto after = rig.post("/chat/completions", {{"messages", first_messages("q")}}, "after");
  REQUIRE(after);
  CHECK(after->status == 200);
}

TEST_CASE("a session that neither calls nor rewards within agent.session_timeout_s is a lost episode") {
  AgentRig rig(/*max_turns=*/4, /*session_timeout_ms=*/300);
  const auto started = rig.post("/chat/completions", {{"messages", first_messages("q")}}, "gone");
  REQUIRE(started);
  REQUIRE(started->status == 200);
  std::string lost_detail;
  (*rig.coordinator)
      ->receive([&](const sao::msg::EpisodeLost& lost) { lost_detail = lost.detail; }, caf::after(kHangGuard) >> [] {});
  CHECK(lost_detail.find("agent session gone abandoned: no call or reward within") != std::string::npos);
  CHECK(rig.status_number(rig.agent, "sessions_abandoned") == 1);
  const auto late = rig.post("/episodes/gone/reward", {{"reward", 1.0}});
  REQUIRE(late);
  CHECK(late->status == 404);
}
