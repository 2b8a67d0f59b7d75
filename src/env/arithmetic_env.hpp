// The arithmetic task as a single-turn environment: reset shows "12+34=",
// the policy answers, step scores it by exact match (reward 1 or 0).
#pragma once

#include "env/arithmetic.hpp"
#include "env/environment.hpp"

#include <memory>
#include <random>

namespace sao::env {

class ArithmeticEnvironment final : public Environment {
 public:
  explicit ArithmeticEnvironment(ArithmeticConfig config);
  EnvStep reset(uint64_t seed) override;
  EnvStep step(const std::string& action) override;
  std::string name() const override { return "arithmetic"; }
  const ArithmeticProblem& problem() const { return problem_; }

 private:
  ArithmeticTask task_;
  ArithmeticProblem problem_;
  bool episode_open_ = false;
};

// Reads the task section (name, min_digits, max_digits, operators,
// test_fraction, test_size, answer_format); unknown keys are errors.
ArithmeticConfig arithmetic_config_from_json(const nlohmann::json& config, const std::string& where);
// The task section arithmetic_config_from_json reads back, every key included.
nlohmann::json arithmetic_config_to_json(const ArithmeticConfig& config);
std::unique_ptr<Environment> make_arithmetic_environment(const nlohmann::json& config, const std::string& where);

}  // namespace sao::env
