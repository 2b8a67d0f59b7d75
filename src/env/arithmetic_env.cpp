// Arithmetic as an environment; see arithmetic_env.hpp.
#include "env/arithmetic_env.hpp"

#include "base/error.hpp"
#include "base/json_reader.hpp"

namespace sao::env {

ArithmeticEnvironment::ArithmeticEnvironment(ArithmeticConfig config) : task_(std::move(config)) {}

EnvStep ArithmeticEnvironment::reset(uint64_t seed) {
  std::mt19937_64 rng(seed);
  problem_ = task_.sample_train(rng);
  episode_open_ = true;
  EnvStep result;
  result.observation = problem_.prompt();
  return result;
}

EnvStep ArithmeticEnvironment::step(const std::string& action) {
  if (!episode_open_) throw Error("arithmetic environment: step() called before reset() or after the episode ended");
  episode_open_ = false;
  const bool correct = ArithmeticTask::verify(problem_, action, task_.config().answer_format);
  EnvStep result;
  result.reward = correct ? 1.0 : 0.0;
  result.terminated = true;
  result.info = {{"accuracy", correct ? 1.0 : 0.0},
                 {"answer", ArithmeticTask::target_text(problem_, task_.config().answer_format)}};
  return result;
}

ArithmeticConfig arithmetic_config_from_json(const nlohmann::json& config, const std::string& where) {
  ArithmeticConfig task;
  base::JsonReader reader(config, where);
  std::string name = "arithmetic";
  reader.read("name", name);
  if (name != "arithmetic") throw Error(where + ".name: expected \"arithmetic\", got \"" + name + "\"");
  reader.read("min_digits", task.min_digits);
  reader.read("max_digits", task.max_digits);
  reader.read("operators", task.operators);
  reader.read("test_fraction", task.test_fraction);
  reader.read("test_size", task.test_size);
  reader.read("answer_format", task.answer_format);
  reader.reject_unknown_keys();
  try {
    task.validate();
  } catch (const Error& error) {
    throw Error(where + ": " + error.what());
  }
  return task;
}

std::unique_ptr<Environment> make_arithmetic_environment(const nlohmann::json& config, const std::string& where) {
  return std::make_unique<ArithmeticEnvironment>(arithmetic_config_from_json(config, where));
}

}  // namespace sao::env
