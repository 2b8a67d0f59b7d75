// The countdown environment; see countdown_env.hpp for the task and rules.
#include "env/tasks/countdown_env.hpp"
#include "env/env_config.hpp"

#include "base/error.hpp"
#include "base/json_reader.hpp"
#include "base/utf8.hpp"
#include "env/tasks/calculator_env.hpp"

#include <algorithm>
#include <cstdio>
#include <set>

namespace sao::env {

namespace {

constexpr uint64_t kCountdownSplitSalt = 0x636f756e74646f77ULL;  // "countdow"
constexpr uint64_t kCountdownHeldoutSeed = 0x5eedc0de7ULL;
constexpr int64_t kMaxSampleAttempts = 100000;
// A reason shown to the policy as its next observation is cut to this, so a
// long answer cannot make a long observation.
constexpr size_t kMaxFeedbackBytes = 40;

// The verifier's reason as the next turn's observation: bounded, ASCII (a
// reason quotes bytes of the answer only as printable ASCII or as hex), and
// ending in the prompt's cue ':'.
std::string feedback_of(const std::string& reason) {
  return (reason.size() <= kMaxFeedbackBytes ? reason : reason.substr(0, kMaxFeedbackBytes - 3) + "...") + ":";
}

int64_t decimal_digits(int64_t value) {
  int64_t digits = 1;
  for (value = value < 0 ? -value : value; value >= 10; value /= 10) ++digits;
  return digits;
}

// The value of numbers[0] ops[0] numbers[1] ... with * binding tighter than
// + and -. Config bounds (numbers <= 5, |number| <= 1000) keep it in 64 bits.
int64_t flat_value(const std::vector<int64_t>& numbers, const std::string& ops) {
  int64_t total = 0;
  int64_t term = numbers[0];
  int64_t sign = 1;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i] == '*') {
      term *= numbers[i + 1];
      continue;
    }
    total += sign * term;
    sign = ops[i] == '+' ? 1 : -1;
    term = numbers[i + 1];
  }
  return total + sign * term;
}

std::string flat_text(const std::vector<int64_t>& numbers, const std::string& ops) {
  std::string text = std::to_string(numbers[0]);
  for (size_t i = 0; i < ops.size(); ++i) text += ops[i] + std::to_string(numbers[i + 1]);
  return text;
}

// Calls visit(ordered numbers, ops) for every distinct ordering of the
// numbers and every choice of operators between them.
template <typename Visit>
void for_each_flat_expression(std::vector<int64_t> numbers, const std::string& operators, Visit&& visit) {
  std::sort(numbers.begin(), numbers.end());
  const size_t gaps = numbers.size() - 1;
  size_t combinations = 1;
  for (size_t i = 0; i < gaps; ++i) combinations *= operators.size();
  std::string ops(gaps, '+');
  do {
    for (size_t code = 0; code < combinations; ++code) {
      size_t rest = code;
      for (size_t i = 0; i < gaps; ++i) {
        ops[i] = operators[rest % operators.size()];
        rest /= operators.size();
      }
      visit(numbers, ops);
    }
  } while (std::next_permutation(numbers.begin(), numbers.end()));
}

}  // namespace

std::string CountdownProblem::prompt() const {
  std::string text;
  for (size_t i = 0; i < numbers.size(); ++i) text += (i == 0 ? "" : " ") + std::to_string(numbers[i]);
  return text + "=" + std::to_string(target) + ":";
}

CountdownVerdict verify_countdown(const CountdownProblem& problem, const std::string& action) {
  // Whitespace is dropped; positions in reasons count in the action as written.
  std::string expression;
  std::vector<size_t> written_at;
  for (size_t i = 0; i < action.size(); ++i) {
    const char byte = action[i];
    if (byte != ' ' && byte != '\t' && byte != '\r' && byte != '\n' && byte != '\f' && byte != '\v') {
      expression += byte;
      written_at.push_back(i + 1);
    }
  }
  if (expression.empty()) return {false, "empty answer"};
  std::multiset<int64_t> left(problem.numbers.begin(), problem.numbers.end());
  for (size_t i = 0; i < expression.size();) {
    const char byte = expression[i];
    if (byte >= '0' && byte <= '9') {
      size_t end = i;
      while (end < expression.size() && expression[end] >= '0' && expression[end] <= '9') ++end;
      const std::string digits = expression.substr(i, end - i);
      // Numbers here are at most 4 digits; a longer run is quoted in part, so a reason stays short.
      const std::string shown = digits.size() > 8 ? digits.substr(0, 7) + "..." : digits;
      if (digits.size() > 1 && digits[0] == '0') return {false, "the number " + shown + " has a leading zero"};
      if (digits.size() > 7) return {false, "uses " + shown + ", which is not one of the numbers"};
      const int64_t number = std::stoll(digits);
      const auto found = left.find(number);
      if (found == left.end()) return {false, "uses " + digits + ", which is not one of the numbers left"};
      left.erase(found);
      i = end;
      continue;
    }
    if (byte == '-' &&
        (i == 0 || !((expression[i - 1] >= '0' && expression[i - 1] <= '9') || expression[i - 1] == ')'))) {
      return {false, "'-' at position " + std::to_string(written_at[i]) + " negates; '-' may only subtract"};
    }
    if (byte != '+' && byte != '-' && byte != '*' && byte != '(' && byte != ')') {
      return {false, "unexpected " + base::quoted_byte(byte) + " at position " + std::to_string(written_at[i])};
    }
    ++i;
  }
  if (!left.empty()) return {false, "does not use " + std::to_string(*left.begin())};
  const auto value = evaluate_expression(expression);
  if (!value.ok) return {false, "not an expression: " + value.error};
  if (value.value != problem.target) {
    return {false, "equals " + std::to_string(value.value) + ", not " + std::to_string(problem.target)};
  }
  return {true, "correct"};
}

std::vector<std::string> countdown_solutions(const CountdownProblem& problem, const std::string& operators) {
  std::vector<std::string> solutions;
  for_each_flat_expression(problem.numbers, operators,
                           [&](const std::vector<int64_t>& numbers, const std::string& ops) {
                             if (flat_value(numbers, ops) == problem.target)
                               solutions.push_back(flat_text(numbers, ops));
                           });
  std::sort(solutions.begin(), solutions.end());
  solutions.erase(std::unique(solutions.begin(), solutions.end()), solutions.end());
  return solutions;
}

CountdownEnvironment::CountdownEnvironment(CountdownConfig config) : config_(std::move(config)) {
  std::mt19937_64 rng(kCountdownHeldoutSeed);
  std::set<std::string> seen;
  for (int64_t attempt = 0; static_cast<int64_t>(heldout_.size()) < config_.heldout_size; ++attempt) {
    if (attempt > kMaxSampleAttempts * 10) {
      throw Error("countdown environment: only " + std::to_string(heldout_.size()) + " held-out problems found for " +
                  std::to_string(config_.heldout_size) +
                  " requested; lower heldout_size or widen the number or target range");
    }
    auto problem = sample_problem(rng);
    if (is_heldout(problem) && seen.insert(problem.prompt()).second) heldout_.push_back(std::move(problem));
  }
}

bool CountdownEnvironment::is_heldout(const CountdownProblem& problem) const {
  return base::hash_unit(base::splitmix64(kCountdownSplitSalt ^ hash_text(problem.prompt()))) < config_.test_fraction;
}

CountdownProblem CountdownEnvironment::sample_problem(std::mt19937_64& rng) const {
  // Raw 64-bit draws only: std distributions differ between standard libraries.
  const auto span = static_cast<uint64_t>(config_.max_number - config_.min_number + 1);
  for (int64_t attempt = 0; attempt < kMaxSampleAttempts; ++attempt) {
    CountdownProblem problem;
    for (int64_t i = 0; i < config_.numbers; ++i) {
      problem.numbers.push_back(config_.min_number + static_cast<int64_t>(rng() % span));
    }
    std::set<int64_t> reachable;
    for_each_flat_expression(problem.numbers, config_.operators,
                             [&](const std::vector<int64_t>& numbers, const std::string& ops) {
                               const int64_t value = flat_value(numbers, ops);
                               if (value >= config_.min_target && value <= config_.max_target) reachable.insert(value);
                             });
    if (reachable.empty()) continue;
    auto chosen = reachable.begin();
    std::advance(chosen, static_cast<std::ptrdiff_t>(rng() % reachable.size()));
    problem.target = *chosen;
    return problem;
  }
  throw Error("countdown environment: no problem with a target in [" + std::to_string(config_.min_target) + ", " +
              std::to_string(config_.max_target) + "] found; widen the target range");
}

CountdownProblem CountdownEnvironment::sample_train(uint64_t seed) const {
  std::mt19937_64 rng(base::splitmix64(seed));
  for (int64_t attempt = 0; attempt < kMaxSampleAttempts; ++attempt) {
    auto problem = sample_problem(rng);
    if (!is_heldout(problem)) return problem;
  }
  throw Error("countdown environment: no training problem found; lower test_fraction");
}

EnvStep CountdownEnvironment::start(const CountdownProblem& problem) {
  problem_ = problem;
  turn_ = 0;
  open_ = true;
  EnvStep result;
  result.observation = problem_.prompt();
  result.info = {{"episode_key", "countdown:" + result.observation}};
  return result;
}

EnvStep CountdownEnvironment::reset(uint64_t seed) {
  return start(sample_train(seed));
}

EnvStep CountdownEnvironment::reset_heldout(int64_t index) {
  if (index < 0 || index >= heldout_size()) {
    throw Error("countdown environment: held-out index " + std::to_string(index) + " outside [0, " +
                std::to_string(heldout_size()) + ")");
  }
  return start(heldout_[static_cast<size_t>(index)]);
}

EnvStep CountdownEnvironment::step(const std::string& action) {
  if (!open_) throw Error("countdown environment: step() called before reset() or after the episode ended");
  ++turn_;
  const auto verdict = verify_countdown(problem_, action);
  EnvStep result;
  if (!verdict.correct && turn_ < config_.max_turns) {
    result.observation = feedback_of(verdict.reason);
    return result;
  }
  open_ = false;
  result.reward = verdict.correct ? 1.0 : 0.0;
  result.terminated = true;
  result.info = {
      {"accuracy", result.reward}, {"success", verdict.correct}, {"reason", verdict.reason}, {"turns", turn_}};
  return result;
}

EnvLimits CountdownEnvironment::limits() const {
  EnvLimits limits;
  limits.max_turns = config_.max_turns;
  const int64_t number_bytes = std::max(decimal_digits(config_.min_number), decimal_digits(config_.max_number));
  const int64_t target_bytes = std::max(decimal_digits(config_.min_target) + (config_.min_target < 0 ? 1 : 0),
                                        decimal_digits(config_.max_target) + (config_.max_target < 0 ? 1 : 0));
  // The demonstrations' form: numbers joined by single operators.
  limits.max_action_bytes = config_.numbers * number_bytes + config_.numbers - 1;
  limits.max_observation_bytes = config_.numbers * (number_bytes + 1) + target_bytes + 1;
  if (config_.max_turns > 1) {
    limits.max_observation_bytes = std::max<int64_t>(limits.max_observation_bytes, kMaxFeedbackBytes + 1);
  }
  return limits;
}

std::vector<SftEpisode> CountdownEnvironment::demonstrations(int64_t count, uint64_t seed) const {
  std::vector<SftEpisode> episodes;
  episodes.reserve(static_cast<size_t>(std::max<int64_t>(count, 0)));
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t episode_seed = base::splitmix64(seed) + static_cast<uint64_t>(i);
    const auto problem = sample_train(episode_seed);
    const auto solutions = countdown_solutions(problem, config_.operators);
    // sample_problem only picks reachable targets, so there is always one.
    std::mt19937_64 rng(base::splitmix64(episode_seed ^ kCountdownSplitSalt));
    SftEpisode episode;
    episode.prompt = problem.prompt();
    if (config_.max_turns > 1 && config_.retry_demonstration_rate > 0.0) {
      std::vector<std::string> wrong;
      for_each_flat_expression(problem.numbers, config_.operators,
                               [&](const std::vector<int64_t>& numbers, const std::string& ops) {
                                 if (flat_value(numbers, ops) != problem.target)
                                   wrong.push_back(flat_text(numbers, ops));
                               });
      std::sort(wrong.begin(), wrong.end());
      wrong.erase(std::unique(wrong.begin(), wrong.end()), wrong.end());
      // uniform in [0, 1) from 53 random bits: portable, unlike std distributions.
      const auto coin = [&rng] { return static_cast<double>(rng() >> 11) * 0x1.0p-53; };
      for (int64_t turn = 1; turn < config_.max_turns && !wrong.empty(); ++turn) {
        if (coin() >= config_.retry_demonstration_rate) break;
        const size_t pick = rng() % wrong.size();
        const auto attempt = wrong[pick];
        wrong.erase(wrong.begin() + static_cast<std::ptrdiff_t>(pick));
        episode.turns.push_back({attempt, feedback_of(verify_countdown(problem, attempt).reason), false});
      }
    }
    const auto& chosen = solutions[rng() % solutions.size()];
    episode.turns.push_back({chosen, "", true});
    episodes.push_back(std::move(episode));
  }
  return episodes;
}

CountdownConfig countdown_config_from_json(const nlohmann::json& config, const std::string& where) {
  CountdownConfig result;
  base::JsonReader reader(config, where);
  read_env_name(reader, CountdownEnvironment::kName, where);
  reader.read("numbers", result.numbers, base::IntRange{2, 5});
  reader.read("min_number", result.min_number, base::IntRange{0, 1000});
  reader.read("max_number", result.max_number, base::IntRange{0, 1000});
  reader.read("operators", result.operators);
  reader.read("min_target", result.min_target, base::IntRange{-1000000, 1000000});
  reader.read("max_target", result.max_target, base::IntRange{-1000000, 1000000});
  reader.read("max_turns", result.max_turns, base::IntRange{1, 8});
  reader.read("retry_demonstration_rate", result.retry_demonstration_rate, base::RealRange{0.0, 1.0});
  reader.read("test_fraction", result.test_fraction, base::RealRange{0.0, 1.0, true, true});
  reader.read("heldout_size", result.heldout_size, base::IntRange{0, 10000});
  reader.reject_unknown_keys();
  if (result.max_number < result.min_number) {
    throw Error(where + ".max_number: must be >= min_number (" + std::to_string(result.min_number) + ")");
  }
  if (result.operators.empty() || result.operators.find_first_not_of("+-*") != std::string::npos) {
    throw Error(where + ".operators: must be a non-empty string of + - *, got \"" + result.operators + "\"");
  }
  if (result.max_target < result.min_target) {
    throw Error(where + ".max_target: must be >= min_target (" + std::to_string(result.min_target) + ")");
  }
  return result;
}

std::unique_ptr<Environment> make_countdown_environment(const nlohmann::json& config, const std::string& where) {
  return std::make_unique<CountdownEnvironment>(countdown_config_from_json(config, where));
}

}  // namespace sao::env
