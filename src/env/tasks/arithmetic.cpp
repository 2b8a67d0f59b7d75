// Arithmetic task implementation. Why hand-rolled hashing and sampling instead
// of std::hash / std::uniform_int_distribution: both are implementation-defined,
// and the split and the test set must be identical on every compiler and
// standard library, or evaluation numbers stop being comparable.
#include "env/tasks/arithmetic.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>

#include "base/error.hpp"
#include "base/hash.hpp"

namespace sao::env {
namespace {

// Enumeration budget for validate()/test-set top-up: large enough to count
// every problem of a 3-digit config exactly, small enough to stay well under a
// second when a config asks for more held-out problems than can be found.
constexpr uint64_t kEnumerationBudget = uint64_t{1} << 25;
constexpr uint64_t kTestSetSeed = 0x5A0A417E57ULL;
constexpr uint64_t kArithmeticSplitSalt = 0x9E3779B97F4A7C15ULL;

// Uniform in [0, n) by rejection on raw mt19937_64 output, whose sequence the
// standard fixes exactly (unlike uniform_int_distribution's mapping).
uint64_t uniform_below(std::mt19937_64& rng, uint64_t n) {
  const uint64_t limit = std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % n;
  uint64_t x = rng();
  while (x >= limit) x = rng();
  return x % n;
}

int64_t pow10(int exponent) {
  int64_t value = 1;
  for (int i = 0; i < exponent; ++i) value *= 10;
  return value;
}

// Smallest number with `digits` digits; 0 is the smallest 1-digit number.
int64_t lowest_with_digits(int digits) {
  return digits == 1 ? 0 : pow10(digits - 1);
}
int64_t highest_with_digits(int digits) {
  return pow10(digits) - 1;
}

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

std::string_view trim_ascii(std::string_view text) {
  while (!text.empty() && is_ascii_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_ascii_space(text.back())) text.remove_suffix(1);
  return text;
}

[[noreturn]] void config_error(const std::string& key, const std::string& what) {
  throw sao::Error("task." + key + ": " + what);
}

// Visits every problem of the config in a fixed order (operator, a, b) until
// `visit` returns false or the budget runs out. Returns true iff it finished
// the whole space or was stopped by `visit` (i.e. not cut off by the budget).
template <typename Visit>
bool enumerate_problems(const ArithmeticConfig& config, uint64_t budget, Visit visit) {
  const int64_t lo = lowest_with_digits(config.min_digits);
  const int64_t hi = highest_with_digits(config.max_digits);
  uint64_t visited = 0;
  for (char op : config.operators) {
    for (int64_t a = lo; a <= hi; ++a) {
      for (int64_t b = lo; b <= hi; ++b) {
        if (visited++ >= budget) return false;
        if (!visit(ArithmeticProblem{a, op, b})) return true;
      }
    }
  }
  return true;
}

void validate_digits(const ArithmeticConfig& config) {
  if (config.min_digits < 1) {
    config_error("min_digits", "must be >= 1, got " + std::to_string(config.min_digits));
  }
  if (config.max_digits > 9) {
    // 9 digits keeps a 9x9-digit product inside int64.
    config_error("max_digits", "must be <= 9, got " + std::to_string(config.max_digits));
  }
  if (config.max_digits < config.min_digits) {
    config_error("max_digits", "must be >= task.min_digits (" + std::to_string(config.min_digits) + "), got " +
                                   std::to_string(config.max_digits));
  }
}

void validate_operators(const ArithmeticConfig& config) {
  if (config.operators.empty()) config_error("operators", "must not be empty (use some of \"+-*\")");
  for (char op : config.operators) {
    if (op != '+' && op != '-' && op != '*') {
      config_error("operators", "unsupported operator '" + std::string(1, op) + "' in \"" + config.operators +
                                    "\" (allowed: + - *)");
    }
  }
}

// Counts held-out problems, stopping as soon as test_size of them and one
// training problem are found, so large spaces stay cheap.
void validate_test_size(const ArithmeticConfig& config) {
  if (config.test_size < 1) {
    config_error("test_size", "must be >= 1, got " + std::to_string(config.test_size));
  }
  int64_t test_count = 0;
  int64_t train_count = 0;
  const bool complete = enumerate_problems(config, kEnumerationBudget, [&](const ArithmeticProblem& p) {
    (split_of(p, config.test_fraction) == Split::kTest ? test_count : train_count) += 1;
    return test_count < config.test_size || train_count == 0;
  });
  if (test_count < config.test_size) {
    const std::string scope = complete ? "only " + std::to_string(test_count) + " exist"
                                       : "only " + std::to_string(test_count) + " found among the first " +
                                             std::to_string(kEnumerationBudget) + " problems";
    config_error("test_size", std::to_string(config.test_size) + " held-out problems requested but " + scope +
                                  " for this config; lower task.test_size or raise task.test_fraction / "
                                  "task.max_digits");
  }
  if (train_count == 0) {
    config_error("test_fraction", "leaves no training problems for this config");
  }
}

// Written as a negated range so NaN is rejected too.
void validate_probability(const std::string& key, double value) {
  if (!(value >= 0.0 && value <= 1.0)) {
    std::ostringstream got;
    got << value;
    config_error(key, "must be in [0, 1], got " + got.str());
  }
}

}  // namespace

void ArithmeticConfig::validate() const {
  validate_digits(*this);
  validate_operators(*this);
  // Written as a negated range so NaN is rejected too.
  if (!(test_fraction > 0.0 && test_fraction <= 0.5)) {
    config_error("test_fraction", "must be in (0, 0.5], got " + std::to_string(test_fraction));
  }
  validate_probability("demonstration_slip_rate", demonstration_slip_rate);
  if (answer_format != "plain" && answer_format != "reversed") {
    config_error("answer_format", "must be \"plain\" or \"reversed\", got \"" + answer_format + "\"");
  }
  validate_probability("demonstration_worked_rate", demonstration_worked_rate);
  if (demonstration_worked_rate > 0.0 && answer_format != "plain") {
    config_error("demonstration_worked_rate",
                 "a worked answer writes the reversed digits before the answer, so it needs answer_format "
                 "\"plain\" (got \"" +
                     answer_format + "\"); set it to 0 to use answer_format \"" + answer_format + "\"");
  }
  validate_test_size(*this);
}

std::string ArithmeticProblem::prompt() const {
  return std::to_string(a) + op + std::to_string(b) + "=";
}

std::string ArithmeticProblem::answer() const {
  return std::to_string(result());
}

int64_t ArithmeticProblem::result() const {
  int64_t out = 0;
  bool overflow = false;
  switch (op) {
    case '+':
      overflow = __builtin_add_overflow(a, b, &out);
      break;
    case '-':
      overflow = __builtin_sub_overflow(a, b, &out);
      break;
    case '*':
      overflow = __builtin_mul_overflow(a, b, &out);
      break;
    default:
      throw sao::Error("ArithmeticProblem::result: unknown operator '" + std::string(1, op) + "' in " + prompt());
  }
  if (overflow) throw sao::Error("ArithmeticProblem::result: int64 overflow in " + prompt());
  return out;
}

bool ArithmeticProblem::operator<(const ArithmeticProblem& other) const {
  return std::tie(a, op, b) < std::tie(other.a, other.op, other.b);
}

std::ostream& operator<<(std::ostream& out, const ArithmeticProblem& problem) {
  return out << problem.prompt();
}

Split split_of(const ArithmeticProblem& problem, double test_fraction) {
  uint64_t h = base::splitmix64(kArithmeticSplitSalt ^ static_cast<uint64_t>(problem.a));
  h = base::splitmix64(h ^ static_cast<unsigned char>(problem.op));
  h = base::splitmix64(h ^ static_cast<uint64_t>(problem.b));
  return base::hash_unit(h) < test_fraction ? Split::kTest : Split::kTrain;
}

ArithmeticTask::ArithmeticTask(ArithmeticConfig config) : config_(std::move(config)) {
  config_.validate();
  test_set_ = build_test_set();
}

ArithmeticProblem ArithmeticTask::sample_any(std::mt19937_64& rng) const {
  const auto digit_span = static_cast<uint64_t>(config_.max_digits - config_.min_digits + 1);
  auto operand = [&] {
    const int digits = config_.min_digits + static_cast<int>(uniform_below(rng, digit_span));
    const int64_t lo = lowest_with_digits(digits);
    const auto count = static_cast<uint64_t>(highest_with_digits(digits) - lo + 1);
    return lo + static_cast<int64_t>(uniform_below(rng, count));
  };
  ArithmeticProblem problem;
  problem.a = operand();
  problem.op = config_.operators[uniform_below(rng, config_.operators.size())];
  problem.b = operand();
  return problem;
}

ArithmeticProblem ArithmeticTask::sample_train(std::mt19937_64& rng) const {
  // test_fraction <= 0.5, so this takes at most two draws on average.
  for (;;) {
    ArithmeticProblem problem = sample_any(rng);
    if (split_of(problem, config_.test_fraction) == Split::kTrain) return problem;
  }
}

// Draws held-out problems from the training distribution so the test set
// measures the same thing training optimises. When the space is so small that
// the draws cannot find enough distinct ones in reasonable time, the rest come
// from the fixed enumeration order (validate() proved enough exist there).
std::vector<ArithmeticProblem> ArithmeticTask::build_test_set() const {
  const auto wanted = static_cast<size_t>(config_.test_size);
  std::vector<ArithmeticProblem> problems;
  std::set<ArithmeticProblem> seen;
  std::mt19937_64 rng(kTestSetSeed);
  const uint64_t max_draws = 200 * static_cast<uint64_t>(wanted) + 1'000'000;
  for (uint64_t draw = 0; draw < max_draws && problems.size() < wanted; ++draw) {
    ArithmeticProblem problem = sample_any(rng);
    if (split_of(problem, config_.test_fraction) != Split::kTest) continue;
    if (seen.insert(problem).second) problems.push_back(problem);
  }
  enumerate_problems(config_, kEnumerationBudget, [&](const ArithmeticProblem& p) {
    if (problems.size() >= wanted) return false;
    if (split_of(p, config_.test_fraction) == Split::kTest && seen.insert(p).second) problems.push_back(p);
    return true;
  });
  return problems;
}

namespace {
std::string format_answer(int64_t value, const std::string& answer_format) {
  std::string answer = std::to_string(value);
  if (answer_format == "reversed") {
    const size_t digits_begin = !answer.empty() && answer[0] == '-' ? 1 : 0;
    std::reverse(answer.begin() + static_cast<std::ptrdiff_t>(digits_begin), answer.end());
  }
  return answer;
}

// Digit-wise combination of two non-negative numbers, no carry between digits.
int64_t digitwise(int64_t a, int64_t b, int (*combine)(int, int)) {
  int64_t out = 0;
  int64_t place = 1;
  while (a > 0 || b > 0) {
    out += combine(static_cast<int>(a % 10), static_cast<int>(b % 10)) * place;
    a /= 10;
    b /= 10;
    place *= 10;
  }
  return out;
}
}  // namespace

std::string ArithmeticTask::target_text(const ArithmeticProblem& problem, const std::string& answer_format) {
  return format_answer(problem.result(), answer_format);
}

int64_t ArithmeticTask::carry_forgotten_result(const ArithmeticProblem& problem) {
  if (problem.a < 0 || problem.b < 0) return problem.result();
  const auto sum_mod_10 = [](int x, int y) { return (x + y) % 10; };
  const auto larger_less_smaller = [](int x, int y) { return x > y ? x - y : y - x; };
  switch (problem.op) {
    case '+':
      return digitwise(problem.a, problem.b, sum_mod_10);
    case '-':
      return problem.a >= problem.b ? digitwise(problem.a, problem.b, larger_less_smaller)
                                    : -digitwise(problem.b, problem.a, larger_less_smaller);
    default:
      return problem.result();
  }
}

std::string ArithmeticTask::worked_text(int64_t value) {
  return "w" + format_answer(value, "reversed") + ">" + format_answer(value, "plain");
}

bool ArithmeticTask::is_worked(std::string_view model_output) {
  const auto trimmed = trim_ascii(model_output);
  return !trimmed.empty() && trimmed.front() == 'w';
}

namespace {
// A 53-bit uniform draw from the raw generator: portable, like the sampling.
double uniform_draw(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}
}  // namespace

std::string ArithmeticTask::demonstration_text(const ArithmeticProblem& problem, std::mt19937_64& rng) const {
  // No draw at rate 0, so a teacher without slips or worked answers leaves
  // the SFT stream (and every warm start measured before these knobs)
  // unchanged.
  int64_t value = problem.result();
  if (config_.demonstration_slip_rate > 0.0 && uniform_draw(rng) < config_.demonstration_slip_rate) {
    value = carry_forgotten_result(problem);
  }
  if (config_.demonstration_worked_rate > 0.0 && uniform_draw(rng) < config_.demonstration_worked_rate) {
    return worked_text(value);
  }
  return format_answer(value, config_.answer_format);
}

bool ArithmeticTask::verify(const ArithmeticProblem& problem, std::string_view model_output,
                            const std::string& answer_format) {
  // String comparison, never parsing: "046", "+46", "46.0" are wrong by
  // construction, and a thousand-digit output cannot overflow anything.
  // A worked answer ("w24>42") is graded by its answer alone, the text after
  // its last '>'; the work before it is the policy's own business.
  return graded_answer(model_output) == target_text(problem, answer_format);
}

std::string_view ArithmeticTask::graded_answer(std::string_view model_output) {
  const auto answer = trim_ascii(model_output);
  const auto last_arrow = answer.rfind('>');
  if (is_worked(answer) && last_arrow != std::string_view::npos) return trim_ascii(answer.substr(last_arrow + 1));
  return answer;
}

std::string ArithmeticTask::sft_text(const ArithmeticProblem& problem, const std::string& answer_format) {
  return problem.prompt() + target_text(problem, answer_format);
}

}  // namespace sao::env
