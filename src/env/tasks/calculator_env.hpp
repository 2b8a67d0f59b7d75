// The calculator environment: an agentic task with one tool. The policy is
// asked an integer expression ("What is 482*37+905?") too long to work out in
// its head; it may call the `calculator` tool in Qwen's tool-call format and
// then answers. A tool call's result comes back as a tool turn (info "role"
// "tool"), and the schema of the tool is given at reset (info "tools"), so a
// chat template lists the tool and wraps results as it was trained to.
//
//   reset(7)  -> "What is 482*37+905?"            info.tools = [{calculator schema}]
//   step("<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"482*37+905\"}}\n</tool_call>")
//             -> observation "18739", role "tool", reward 0
//   step("The answer is 18739.")
//             -> reward 1, terminated, info {"accuracy": 1, "success": true, "tool_calls": 1, ...}
//
// Rules. An action holding <tool_call>...</tool_call> is a call: the JSON
// inside must name "calculator" with arguments {"expression": "..."} (the
// arguments may also be a JSON string of that object, as OpenAI-style
// clients write them). A malformed call, an unknown tool or an expression
// that does not evaluate is answered with "error: ..." as the tool's result,
// and the episode goes on, because reading a tool's error is part of using
// tools. Any other action is the answer: the last number in it is compared
// with the expression's value (reward 1 or 0). A call on the last allowed
// turn ends the episode unanswered (reward 0).
//
// The tool evaluates integers with + - * and parentheses, at most 256
// characters and 32 levels of nesting, in 64-bit arithmetic (overflow is an
// error, never a wrapped value).
//
// Config keys (the task section): name ("calculator"), min_operands (2),
// max_operands (3), max_digits (3), operators ("+-*"), max_turns (3),
// test_fraction (0.1), heldout_size (200).
#pragma once

#include "env/environment.hpp"

#include <random>
#include <string>
#include <vector>

namespace sao::env {

struct CalculatorConfig {
  int64_t min_operands = 2;
  int64_t max_operands = 3;
  int64_t max_digits = 3;
  std::string operators = "+-*";
  int64_t max_turns = 3;
  double test_fraction = 0.1;
  int64_t heldout_size = 200;
};

// What the tool does with an expression: the value, or why there is none.
struct CalculatorResult {
  bool ok = false;
  int64_t value = 0;
  std::string error;  // e.g. "unexpected 'x' at position 3"
};
CalculatorResult evaluate_expression(const std::string& expression);

// The tool call in an action, as the environment reads it.
struct ToolCall {
  bool present = false;    // the action contains <tool_call>
  std::string error;       // set when the call is malformed
  std::string expression;  // the "expression" argument when well formed
};
ToolCall parse_calculator_call(const std::string& action);

// The action text of a call, as Qwen's chat template writes an assistant
// message carrying it (string arguments).
std::string calculator_call_text(const std::string& expression);

class CalculatorEnvironment final : public Environment {
 public:
  explicit CalculatorEnvironment(CalculatorConfig config);

  EnvStep reset(uint64_t seed) override;
  EnvStep step(const std::string& action) override;
  // The one spelling of its name: registry, config section, name().
  static constexpr const char* kName = "calculator";
  std::string name() const override { return kName; }

  int64_t heldout_size() const override { return static_cast<int64_t>(heldout_.size()); }
  EnvStep reset_heldout(int64_t index) override;
  EnvLimits limits() const override;
  std::vector<SftEpisode> demonstrations(int64_t count, uint64_t seed) const override;

  static std::string prompt_for(const std::string& expression) { return "What is " + expression + "?"; }
  // The tool's JSON schema list, as reset's info "tools" carries it.
  static nlohmann::json tools_schema();
  bool is_heldout(const std::string& expression) const;

 private:
  std::string sample_expression(std::mt19937_64& rng) const;  // any split
  std::string sample_train(uint64_t seed) const;
  EnvStep start(std::string expression);
  EnvStep finish(double reward, const std::string& reason);

  CalculatorConfig config_;
  std::vector<std::string> heldout_;
  std::string expression_;
  int64_t answer_ = 0;
  int64_t turn_ = 0;
  int64_t tool_calls_ = 0;
  int64_t tool_errors_ = 0;
  bool open_ = false;
};

CalculatorConfig calculator_config_from_json(const nlohmann::json& config, const std::string& where);
std::unique_ptr<Environment> make_calculator_environment(const nlohmann::json& config, const std::string& where);

}  // namespace sao::env
