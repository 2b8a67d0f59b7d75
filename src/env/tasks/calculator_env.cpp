// The calculator environment; see calculator_env.hpp for the task and rules.
#include "env/tasks/calculator_env.hpp"
#include "env/env_config.hpp"

#include "base/error.hpp"
#include "base/json_parse.hpp"
#include "base/json_reader.hpp"
#include "base/utf8.hpp"
#include "env/verifier.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <set>

namespace sao::env {

namespace {

constexpr uint64_t kCalculatorSplitSalt = 0x63616c63756c6174ULL;  // "calculat"
constexpr uint64_t kCalculatorHeldoutSeed = 0x5eed0ca1ULL;
constexpr size_t kMaxExpressionBytes = 256;
constexpr int kMaxNesting = 32;
// A tool's error is shown to the policy: bounded, so it cannot fill the context.
constexpr size_t kMaxToolErrorBytes = 120;
const char* const kToolName = "calculator";

// Recursive descent over  sum := product (('+'|'-') product)*
//                         product := factor ('*' factor)*
//                         factor := '-' factor | '(' sum ')' | digits
// Depth is bounded (kMaxNesting) so no input can exhaust the stack.
class ExpressionParser {
 public:
  explicit ExpressionParser(const std::string& text) : text_(text) {}

  int64_t parse() {
    const int64_t value = sum(0);
    skip_spaces();
    if (position_ < text_.size()) unexpected();
    return value;
  }

 private:
  [[noreturn]] void unexpected() const {
    if (position_ >= text_.size()) throw Error("the expression ends early");
    throw Error("unexpected " + base::quoted_byte(text_[position_]) + " at position " + std::to_string(position_ + 1));
  }
  void skip_spaces() {
    while (position_ < text_.size() && (text_[position_] == ' ' || text_[position_] == '\t')) ++position_;
  }
  bool take(char wanted) {
    skip_spaces();
    if (position_ < text_.size() && text_[position_] == wanted) {
      ++position_;
      return true;
    }
    return false;
  }
  // The builtins report overflow instead of wrapping (signed overflow is undefined behaviour).
  static void check(bool overflowed) {
    if (overflowed) throw Error("the value does not fit in 64 bits");
  }
  int64_t sum(int depth) {
    int64_t value = product(depth);
    while (true) {
      if (take('+')) {
        const int64_t right = product(depth);
        check(__builtin_add_overflow(value, right, &value));
      } else if (take('-')) {
        const int64_t right = product(depth);
        check(__builtin_sub_overflow(value, right, &value));
      } else {
        return value;
      }
    }
  }
  int64_t product(int depth) {
    int64_t value = factor(depth);
    while (take('*')) {
      const int64_t right = factor(depth);
      check(__builtin_mul_overflow(value, right, &value));
    }
    return value;
  }
  int64_t factor(int depth) {
    if (depth > kMaxNesting) throw Error("nested deeper than " + std::to_string(kMaxNesting) + " levels");
    if (take('-')) {
      int64_t negated = 0;
      check(__builtin_sub_overflow(int64_t{0}, factor(depth + 1), &negated));
      return negated;
    }
    if (take('(')) {
      const int64_t value = sum(depth + 1);
      if (!take(')')) unexpected();
      return value;
    }
    skip_spaces();
    if (position_ >= text_.size() || !std::isdigit(static_cast<unsigned char>(text_[position_]))) unexpected();
    int64_t value = 0;
    while (position_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[position_]))) {
      const int64_t digit = text_[position_] - '0';
      check(__builtin_mul_overflow(value, int64_t{10}, &value));
      check(__builtin_add_overflow(value, digit, &value));
      ++position_;
    }
    return value;
  }

  const std::string& text_;
  size_t position_ = 0;
};

std::string tool_error(const std::string& message) {
  std::string text = "error: " + message;
  if (text.size() <= kMaxToolErrorBytes) return text;
  size_t cut = kMaxToolErrorBytes - 3;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 character
  return text.substr(0, cut) + "...";
}

}  // namespace

CalculatorResult evaluate_expression(const std::string& expression) {
  CalculatorResult result;
  if (expression.size() > kMaxExpressionBytes) {
    result.error = "the expression is " + std::to_string(expression.size()) + " characters, over the limit of " +
                   std::to_string(kMaxExpressionBytes);
    return result;
  }
  try {
    result.value = ExpressionParser(expression).parse();
    result.ok = true;
  } catch (const Error& error) {
    result.error = error.what();
  }
  return result;
}

ToolCall parse_calculator_call(const std::string& action) {
  ToolCall call;
  const std::string open = "<tool_call>";
  const std::string close = "</tool_call>";
  const auto begin = action.find(open);
  if (begin == std::string::npos) return call;
  call.present = true;
  const auto end = action.find(close, begin + open.size());
  if (end == std::string::npos) {
    call.error = "<tool_call> without </tool_call>";
    return call;
  }
  if (action.find(open, end) != std::string::npos) {
    call.error = "one tool call per turn";
    return call;
  }
  nlohmann::json body;
  try {
    body = base::parse_json_limited(action.substr(begin + open.size(), end - begin - open.size()), "the tool call", 8);
  } catch (const Error& error) {
    call.error = error.what();
    return call;
  }
  if (!body.is_object()) {
    call.error = "the tool call must be a JSON object, got " + std::string(body.type_name());
    return call;
  }
  const auto name = body.find("name");
  if (name == body.end() || !name->is_string()) {
    call.error = "the tool call has no \"name\"";
    return call;
  }
  if (name->get<std::string>() != kToolName) {
    call.error = "unknown tool \"" + name->get<std::string>() + "\" (the tool is \"calculator\")";
    return call;
  }
  auto arguments = body.value("arguments", nlohmann::json());
  if (arguments.is_string()) {
    try {
      arguments = base::parse_json_limited(arguments.get<std::string>(), "the tool call's arguments", 8);
    } catch (const Error& error) {
      call.error = error.what();
      return call;
    }
  }
  if (!arguments.is_object() || !arguments.contains("expression") || !arguments["expression"].is_string()) {
    call.error = "the arguments must be {\"expression\": \"...\"}";
    return call;
  }
  call.expression = arguments["expression"].get<std::string>();
  return call;
}

std::string calculator_call_text(const std::string& expression) {
  // Spaced as Python's json.dumps (what the template's tojson writes).
  return "<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": " +
         base::dump_json(nlohmann::json(expression)) + "}}\n</tool_call>";
}

nlohmann::json CalculatorEnvironment::tools_schema() {
  return nlohmann::json::array(
      {{{"type", "function"},
        {"function",
         {{"name", kToolName},
          {"description", "Evaluates an integer expression with + - * and parentheses."},
          {"parameters",
           {{"type", "object"},
            {"properties", {{"expression", {{"type", "string"}, {"description", "for example 12*(3+4)"}}}}},
            {"required", {"expression"}}}}}}}});
}

CalculatorEnvironment::CalculatorEnvironment(CalculatorConfig config) : config_(std::move(config)) {
  std::mt19937_64 rng(kCalculatorHeldoutSeed);
  std::set<std::string> seen;
  for (int64_t attempt = 0; static_cast<int64_t>(heldout_.size()) < config_.heldout_size; ++attempt) {
    if (attempt > 1000000) {
      throw Error("calculator environment: only " + std::to_string(heldout_.size()) + " held-out problems found for " +
                  std::to_string(config_.heldout_size) + " requested; lower heldout_size or raise max_digits");
    }
    auto expression = sample_expression(rng);
    if (is_heldout(expression) && seen.insert(expression).second) heldout_.push_back(std::move(expression));
  }
}

bool CalculatorEnvironment::is_heldout(const std::string& expression) const {
  return base::hash_unit(base::splitmix64(kCalculatorSplitSalt ^ hash_text(expression))) < config_.test_fraction;
}

std::string CalculatorEnvironment::sample_expression(std::mt19937_64& rng) const {
  // Raw 64-bit draws only: std distributions differ between standard libraries.
  const auto operands =
      config_.min_operands +
      static_cast<int64_t>(rng() % static_cast<uint64_t>(config_.max_operands - config_.min_operands + 1));
  uint64_t limit = 1;
  for (int64_t i = 0; i < config_.max_digits; ++i) limit *= 10;
  std::string expression;
  for (int64_t i = 0; i < operands; ++i) {
    if (i > 0) expression += config_.operators[rng() % config_.operators.size()];
    expression += std::to_string(rng() % limit);
  }
  return expression;
}

std::string CalculatorEnvironment::sample_train(uint64_t seed) const {
  std::mt19937_64 rng(base::splitmix64(seed));
  for (int attempt = 0; attempt < 100000; ++attempt) {
    auto expression = sample_expression(rng);
    if (!is_heldout(expression)) return expression;
  }
  throw Error("calculator environment: no training problem found; lower test_fraction");
}

EnvStep CalculatorEnvironment::start(std::string expression) {
  const auto value = evaluate_expression(expression);
  // Operands are below 10^max_digits and max_digits * max_operands <= 18, so
  // the value always fits in 64 bits; a failure here is a bug.
  if (!value.ok)
    throw Error("calculator environment: the problem " + expression + " does not evaluate: " + value.error);
  expression_ = std::move(expression);
  answer_ = value.value;
  turn_ = 0;
  tool_calls_ = 0;
  tool_errors_ = 0;
  open_ = true;
  EnvStep result;
  result.observation = prompt_for(expression_);
  result.info = {{"episode_key", expression_}, {"tools", tools_schema()}};
  return result;
}

EnvStep CalculatorEnvironment::reset(uint64_t seed) {
  return start(sample_train(seed));
}

EnvStep CalculatorEnvironment::reset_heldout(int64_t index) {
  if (index < 0 || index >= heldout_size()) {
    throw Error("calculator environment: held-out index " + std::to_string(index) + " outside [0, " +
                std::to_string(heldout_size()) + ")");
  }
  return start(heldout_[static_cast<size_t>(index)]);
}

EnvStep CalculatorEnvironment::finish(double reward, const std::string& reason) {
  open_ = false;
  EnvStep result;
  result.reward = reward;
  result.terminated = true;
  result.info = {{"accuracy", reward},
                 {"success", reward > 0.0},
                 {"reason", reason},
                 {"tool_calls", tool_calls_},
                 {"tool_errors", tool_errors_}};
  return result;
}

EnvStep CalculatorEnvironment::step(const std::string& action) {
  if (!open_) throw Error("calculator environment: step() called before reset() or after the episode ended");
  ++turn_;
  const auto call = parse_calculator_call(action);
  if (!call.present) {
    double written = 0.0;
    std::string text;
    if (!last_number_in(action, written, &text)) return finish(0.0, "no number in the answer");
    if (written == static_cast<double>(answer_)) return finish(1.0, "correct: " + text);
    return finish(0.0, "wrong: " + text + ", expected " + std::to_string(answer_));
  }
  ++tool_calls_;
  if (turn_ >= config_.max_turns) {
    return finish(0.0, "no answer within " + std::to_string(config_.max_turns) + " turns");
  }
  EnvStep result;
  result.info = {{"role", "tool"}};
  if (!call.error.empty()) {
    ++tool_errors_;
    result.observation = tool_error(call.error);
    return result;
  }
  const auto value = evaluate_expression(call.expression);
  if (!value.ok) {
    ++tool_errors_;
    result.observation = tool_error(value.error);
    return result;
  }
  result.observation = std::to_string(value.value);
  return result;
}

EnvLimits CalculatorEnvironment::limits() const {
  EnvLimits limits;
  limits.max_turns = config_.max_turns;
  // A call with the longest problem's expression, its JSON quoting included.
  const auto longest = static_cast<int64_t>(config_.max_operands * (config_.max_digits + 1));
  limits.max_action_bytes = static_cast<int64_t>(calculator_call_text("").size()) + longest;
  limits.max_observation_bytes =
      std::max(static_cast<int64_t>(prompt_for("").size()) + longest, static_cast<int64_t>(kMaxToolErrorBytes));
  return limits;
}

std::vector<SftEpisode> CalculatorEnvironment::demonstrations(int64_t count, uint64_t seed) const {
  std::vector<SftEpisode> episodes;
  const std::string tools = base::dump_json(tools_schema());
  for (int64_t i = 0; i < count; ++i) {
    const auto expression = sample_train(base::splitmix64(seed) + static_cast<uint64_t>(i));
    const auto value = evaluate_expression(expression);
    SftEpisode episode;
    episode.prompt = prompt_for(expression);
    episode.tools = tools;
    // The expert calls the tool with the problem as written, then answers with its result.
    SftTurn call{calculator_call_text(expression), std::to_string(value.value), true};
    call.observation_role = "tool";
    episode.turns.push_back(call);
    episode.turns.push_back({"The answer is " + std::to_string(value.value) + ".", "", true});
    episodes.push_back(std::move(episode));
  }
  return episodes;
}

CalculatorConfig calculator_config_from_json(const nlohmann::json& config, const std::string& where) {
  CalculatorConfig result;
  base::JsonReader reader(config, where);
  read_env_name(reader, CalculatorEnvironment::kName, where);
  reader.read("min_operands", result.min_operands, base::IntRange{2, 8});
  reader.read("max_operands", result.max_operands, base::IntRange{2, 8});
  reader.read("max_digits", result.max_digits, base::IntRange{1, 6});
  reader.read("operators", result.operators);
  reader.read("max_turns", result.max_turns, base::IntRange{1, 16});
  reader.read("test_fraction", result.test_fraction, base::RealRange{0.0, 1.0, true, true});
  reader.read("heldout_size", result.heldout_size, base::IntRange{0, 10000});
  reader.reject_unknown_keys();
  if (result.max_operands < result.min_operands) {
    throw Error(where + ".max_operands: must be >= min_operands (" + std::to_string(result.min_operands) + ")");
  }
  if (result.max_digits * result.max_operands > 18) {
    throw Error(where + ": max_digits * max_operands must be at most 18, so every product fits in 64 bits (got " +
                std::to_string(result.max_digits) + " * " + std::to_string(result.max_operands) + ")");
  }
  if (result.operators.empty() || result.operators.find_first_not_of("+-*") != std::string::npos) {
    throw Error(where + ".operators: must be a non-empty string of + - *, got \"" + result.operators + "\"");
  }
  return result;
}

std::unique_ptr<Environment> make_calculator_environment(const nlohmann::json& config, const std::string& where) {
  return std::make_unique<CalculatorEnvironment>(calculator_config_from_json(config, where));
}

}  // namespace sao::env
