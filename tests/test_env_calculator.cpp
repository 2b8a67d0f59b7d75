// The calculator environment (src/env/tasks/calculator_env.hpp): the tool's
// arithmetic and its errors, how a tool call is read from an action, an
// episode's turns and rewards, and demonstrations that solve their problems.
#include "base/error.hpp"
#include "env/tasks/calculator_env.hpp"
#include "env/environment.hpp"

#include <doctest/doctest.h>

#include <string>

using sao::env::calculator_call_text;
using sao::env::CalculatorEnvironment;
using sao::env::evaluate_expression;
using sao::env::make_environment;
using sao::env::parse_calculator_call;

namespace {

int64_t value_of(const std::string& expression) {
  const auto result = evaluate_expression(expression);
  INFO(expression, ": ", result.error);
  REQUIRE(result.ok);
  return result.value;
}

std::string error_of(const std::string& expression) {
  const auto result = evaluate_expression(expression);
  REQUIRE_FALSE(result.ok);
  return result.error;
}

std::unique_ptr<sao::env::Environment> calculator(const nlohmann::json& config = nlohmann::json::object()) {
  return make_environment("calculator", config, "task");
}

}  // namespace

TEST_CASE("the calculator tool: integer + - * with precedence and parentheses, and named errors") {
  CHECK(value_of("482*37+905") == 18739);
  CHECK(value_of("2-3*4") == -10);
  CHECK(value_of("7-2-3") == 2);  // left to right
  CHECK(value_of(" -(2 + 3) * 4 ") == -20);
  CHECK(value_of("12*(3+4)") == 84);
  CHECK(value_of("--5") == 5);
  CHECK(value_of("9223372036854775807") == INT64_MAX);
  CHECK(error_of("2+") == "the expression ends early");
  CHECK(error_of("") == "the expression ends early");
  CHECK(error_of("2+x") == "unexpected 'x' at position 3");
  CHECK(error_of("(1+2") == "the expression ends early");
  CHECK(error_of("1+2)") == "unexpected ')' at position 4");
  CHECK(error_of("6/3") == "unexpected '/' at position 2");
  CHECK(error_of("1+\xc3\xa9") == "unexpected byte 0xC3 at position 3");
  CHECK(error_of("9223372036854775807+1") == "the value does not fit in 64 bits");
  CHECK(error_of("99999999999999999999") == "the value does not fit in 64 bits");
  CHECK(error_of("4294967296*4294967296") == "the value does not fit in 64 bits");
  CHECK(error_of(std::string(33, '(') + "1" + std::string(33, ')')) == "nested deeper than 32 levels");
  CHECK(value_of(std::string(32, '(') + "1" + std::string(32, ')')) == 1);
  CHECK(error_of(std::string(257, '1')) == "the expression is 257 characters, over the limit of 256");
}

TEST_CASE("a tool call is read from Qwen's <tool_call> block; a malformed one says why") {
  const auto text = calculator_call_text("482*37+905");
  CHECK(text ==
        "<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"482*37+905\"}}\n</tool_call>");
  auto call = parse_calculator_call("I will compute it. " + text);
  CHECK(call.present);
  CHECK(call.error.empty());
  CHECK(call.expression == "482*37+905");
  // OpenAI-style clients write the arguments as a JSON string.
  call = parse_calculator_call(
      "<tool_call>{\"name\": \"calculator\", \"arguments\": \"{\\\"expression\\\": \\\"1+1\\\"}\"}</tool_call>");
  CHECK(call.error.empty());
  CHECK(call.expression == "1+1");

  CHECK_FALSE(parse_calculator_call("The answer is 4.").present);
  CHECK(parse_calculator_call("<tool_call>{\"name\": \"calculator\"").error == "<tool_call> without </tool_call>");
  CHECK(parse_calculator_call(text + text).error == "one tool call per turn");
  CHECK(parse_calculator_call("<tool_call>{\"name\": \"search\", \"arguments\": {}}</tool_call>").error ==
        "unknown tool \"search\" (the tool is \"calculator\")");
  CHECK(parse_calculator_call("<tool_call>[1]</tool_call>").error == "the tool call must be a JSON object, got array");
  CHECK(parse_calculator_call("<tool_call>{\"arguments\": {}}</tool_call>").error == "the tool call has no \"name\"");
  CHECK(parse_calculator_call("<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expr\": \"1\"}}</tool_call>")
            .error == "the arguments must be {\"expression\": \"...\"}");
  CHECK(parse_calculator_call("<tool_call>{name: 1}</tool_call>").error.rfind("the tool call: not valid JSON", 0) == 0);
}

TEST_CASE("an episode: the tools at reset, a call answered as a tool turn, the answer judged") {
  auto env = calculator();
  const auto reset = env->reset(7);
  const std::string expression = reset.info["episode_key"].get<std::string>();
  CHECK(reset.observation == "What is " + expression + "?");
  CHECK(reset.info["tools"] == CalculatorEnvironment::tools_schema());
  CHECK(reset.info["tools"][0]["function"]["name"] == "calculator");
  const int64_t answer = value_of(expression);

  auto step = env->step(calculator_call_text(expression));
  CHECK(step.observation == std::to_string(answer));
  CHECK(step.info["role"] == "tool");
  CHECK(step.reward == 0.0);
  CHECK_FALSE(step.done());
  step = env->step("The answer is " + std::to_string(answer) + ".");
  CHECK(step.terminated);
  CHECK(step.reward == 1.0);
  CHECK(step.info["accuracy"] == 1.0);
  CHECK(step.info["success"] == true);
  CHECK(step.info["tool_calls"] == 1);
  CHECK(step.info["tool_errors"] == 0);
  CHECK_THROWS_WITH_AS(env->step("1"),
                       "calculator environment: step() called before reset() or after the episode ended", sao::Error);

  // A tool error is the tool's answer; the episode goes on. A wrong answer scores 0.
  env->reset(7);
  step = env->step("<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": \"1/0\"}}</tool_call>");
  CHECK(step.observation == "error: unexpected '/' at position 2");
  CHECK(step.info["role"] == "tool");
  CHECK_FALSE(step.done());
  step = env->step("It is " + std::to_string(answer + 1));
  CHECK(step.terminated);
  CHECK(step.reward == 0.0);
  CHECK(step.info["reason"] == "wrong: " + std::to_string(answer + 1) + ", expected " + std::to_string(answer));
  CHECK(step.info["tool_errors"] == 1);

  // A long error is cut to 120 bytes, so a tool cannot fill the context.
  env->reset(7);
  step = env->step("<tool_call>{\"name\": \"" + std::string(300, 'x') + "\"}</tool_call>");
  CHECK(step.observation.size() == 120);
  CHECK(step.observation.rfind("error: unknown tool \"xxx", 0) == 0);
  CHECK(step.observation.substr(117) == "...");
  CHECK(static_cast<int64_t>(step.observation.size()) <= env->limits().max_observation_bytes);

  env->reset(7);
  step = env->step("no idea");
  CHECK(step.terminated);
  CHECK(step.info["reason"] == "no number in the answer");

  // Calling on the last allowed turn ends the episode unanswered.
  auto short_env = calculator({{"max_turns", 2}});
  short_env->reset(7);
  CHECK_FALSE(short_env->step(calculator_call_text("1+1")).done());
  step = short_env->step(calculator_call_text("1+1"));
  CHECK(step.terminated);
  CHECK(step.reward == 0.0);
  CHECK(step.info["reason"] == "no answer within 2 turns");
  CHECK(step.info["tool_calls"] == 2);
}

TEST_CASE("demonstrations call the tool with the problem and answer with its result") {
  auto env = calculator();
  const auto demos = env->demonstrations(20, 3);
  REQUIRE(demos.size() == 20);
  for (const auto& demo : demos) {
    CAPTURE(demo.prompt);
    CHECK(nlohmann::json::parse(demo.tools) == CalculatorEnvironment::tools_schema());
    REQUIRE(demo.turns.size() == 2);
    CHECK(demo.turns[0].observation_role == "tool");
    CHECK(demo.turns[1].observation_role == "user");
    CHECK(demo.turns[1].observation.empty());
    const auto call = parse_calculator_call(demo.turns[0].action);
    REQUIRE(call.error.empty());
    CHECK(demo.prompt == "What is " + call.expression + "?");
    CHECK(demo.turns[0].observation == std::to_string(value_of(call.expression)));
    CHECK(demo.turns[1].action == "The answer is " + demo.turns[0].observation + ".");
    // The training split only.
    CHECK_FALSE(dynamic_cast<CalculatorEnvironment&>(*env).is_heldout(call.expression));
  }
  const auto limits = env->limits();
  CHECK(limits.max_turns == 3);
  CHECK(limits.max_action_bytes >= static_cast<int64_t>(demos[0].turns[0].action.size()));
}

TEST_CASE("calculator config: bounds are checked and named") {
  CHECK_THROWS_WITH(calculator({{"max_digits", 7}}), "task.max_digits: must be an integer in [1, 6], got 7");
  CHECK_THROWS_WITH(calculator({{"max_digits", 6}, {"max_operands", 4}}),
                    "task: max_digits * max_operands must be at most 18, so every product fits in 64 bits (got 6 * 4)");
  CHECK_THROWS_WITH(calculator({{"operators", "+/"}}),
                    "task.operators: must be a non-empty string of + - *, got \"+/\"");
  CHECK_THROWS_WITH(calculator({{"min_operands", 3}, {"max_operands", 2}}),
                    "task.max_operands: must be >= min_operands (3)");
  CHECK_THROWS_WITH(calculator({{"max_turns", 0}}), "task.max_turns: must be an integer in [1, 16], got 0");
  CHECK_THROWS_WITH(calculator({{"name", "dataset"}}), "task.name: expected \"calculator\", got \"dataset\"");
  CHECK_THROWS_AS(calculator({{"digits", 3}}), sao::Error);
  // The largest allowed problems still evaluate: 999999^3 fits in 64 bits.
  auto big = calculator({{"max_digits", 6}, {"min_operands", 3}, {"max_operands", 3}, {"operators", "*"}});
  for (uint64_t seed = 0; seed < 20; ++seed) CHECK_NOTHROW(big->reset(seed));
}
