// Arithmetic as an environment; see arithmetic_env.hpp.
#include "env/tasks/arithmetic_env.hpp"
#include "env/env_config.hpp"

#include "base/error.hpp"
#include "base/json_reader.hpp"

#include <algorithm>

namespace sao::env {

ArithmeticEnvironment::ArithmeticEnvironment(ArithmeticConfig config) : task_(std::move(config)) {}

EnvStep ArithmeticEnvironment::start(const ArithmeticProblem& problem) {
  problem_ = problem;
  episode_open_ = true;
  EnvStep result;
  result.observation = problem_.prompt();
  result.info = {{"episode_key", problem_.prompt()}};
  return result;
}

EnvStep ArithmeticEnvironment::reset(uint64_t seed) {
  std::mt19937_64 rng(seed);
  return start(task_.sample_train(rng));
}

EnvStep ArithmeticEnvironment::reset_heldout(int64_t index) {
  if (index < 0 || index >= heldout_size()) {
    throw Error("arithmetic: held-out index " + std::to_string(index) + " outside [0, " +
                std::to_string(heldout_size()) + ")");
  }
  return start(task_.test_set()[static_cast<size_t>(index)]);
}

EnvLimits ArithmeticEnvironment::limits() const {
  return arithmetic_limits(task_.config().max_digits, 0);
}

EnvLimits arithmetic_limits(int64_t max_digits, int64_t suffix_bytes) {
  EnvLimits limits;
  limits.max_turns = 1;
  // A product of two d-digit numbers has up to 2d digits, plus a sign; a
  // worked answer writes them twice, after 'w' and before '>'.
  const int64_t value = 2 * max_digits + 1;
  limits.max_action_bytes = value + suffix_bytes + 2 + value;
  limits.max_observation_bytes = 2 * max_digits + 4;  // "-a op -b ="
  return limits;
}

std::vector<SftEpisode> ArithmeticEnvironment::demonstrations(int64_t count, uint64_t seed) const {
  std::mt19937_64 rng(seed);
  std::vector<SftEpisode> episodes;
  episodes.reserve(static_cast<size_t>(std::max<int64_t>(count, 0)));
  for (int64_t i = 0; i < count; ++i) {
    const auto problem = task_.sample_train(rng);
    episodes.push_back({problem.prompt(), {{task_.demonstration_text(problem, rng), "", true}}, ""});
  }
  return episodes;
}

nlohmann::json worked_answer_counts(std::string_view action, bool correct) {
  const bool worked = ArithmeticTask::is_worked(action);
  return {{"worked", worked ? 1 : 0}, {"worked_correct", worked && correct ? 1 : 0}};
}

EnvStep ArithmeticEnvironment::step(const std::string& action) {
  if (!episode_open_) throw Error("arithmetic environment: step() called before reset() or after the episode ended");
  episode_open_ = false;
  const bool correct = ArithmeticTask::verify(problem_, action, task_.config().answer_format);
  EnvStep result;
  result.reward = correct ? 1.0 : 0.0;
  result.terminated = true;
  result.info = {{"accuracy", correct ? 1.0 : 0.0},
                 {"counts", worked_answer_counts(action, correct)},
                 {"answer", ArithmeticTask::target_text(problem_, task_.config().answer_format)}};
  return result;
}

namespace {

using base::IntRange;
using base::RealRange;

// The task section's keys but "name", listed once for reading and writing.
template <typename Config, typename Visit>
void arithmetic_keys(Config& task, Visit visit) {
  visit("min_digits", task.min_digits, IntRange{1, 9});
  visit("max_digits", task.max_digits, IntRange{1, 9});  // a 9x9-digit product fits int64
  visit("operators", task.operators);
  visit("test_fraction", task.test_fraction, RealRange{0.0, 0.5, true, false});
  visit("test_size", task.test_size, IntRange{1, 1000000});
  visit("answer_format", task.answer_format);
  visit("demonstration_slip_rate", task.demonstration_slip_rate, RealRange{0.0, 1.0});
  visit("demonstration_worked_rate", task.demonstration_worked_rate, RealRange{0.0, 1.0});
}
}  // namespace

ArithmeticConfig arithmetic_config_from_json(const nlohmann::json& config, const std::string& where) {
  ArithmeticConfig task;
  base::JsonReader reader(config, where);
  read_env_name(reader, ArithmeticEnvironment::kName, where);
  arithmetic_keys(task, base::ReadKeys{reader});
  reader.reject_unknown_keys();
  try {
    task.validate();
  } catch (const Error& error) {
    throw Error(where + ": " + error.what());
  }
  return task;
}

nlohmann::json arithmetic_config_to_json(const ArithmeticConfig& config) {
  nlohmann::json json = {{"name", ArithmeticEnvironment::kName}};
  arithmetic_keys(config, base::WriteKeys{json});
  return json;
}

std::unique_ptr<Environment> make_arithmetic_environment(const nlohmann::json& config, const std::string& where) {
  return std::make_unique<ArithmeticEnvironment>(arithmetic_config_from_json(config, where));
}

}  // namespace sao::env
