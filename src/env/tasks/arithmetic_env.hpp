// The arithmetic task as a single-turn environment: reset shows "12+34=",
// the policy answers, step scores it by exact match (reward 1 or 0). It is an
// environment like any other: its held-out split is the task's test set
// (reset_heldout(i) = test_set()[i]), its warm-start demonstrations are the
// task's teacher (demonstration_text), and the answers that showed their
// work are counted through info "counts" ({"worked", "worked_correct"}),
// which held-out evaluation sums for every environment.
#pragma once

#include "env/environment.hpp"
#include "env/tasks/arithmetic.hpp"

#include <memory>
#include <random>
#include <string_view>
#include <vector>

namespace sao::env {

class ArithmeticEnvironment final : public Environment {
 public:
  explicit ArithmeticEnvironment(ArithmeticConfig config);
  EnvStep reset(uint64_t seed) override;
  EnvStep step(const std::string& action) override;
  // The one spelling of its name: registry, config section, name().
  static constexpr const char* kName = "arithmetic";
  std::string name() const override { return kName; }
  int64_t heldout_size() const override { return static_cast<int64_t>(task_.test_set().size()); }
  EnvStep reset_heldout(int64_t index) override;
  EnvLimits limits() const override;
  // `count` problems of the training split, each answered by the teacher
  // (ArithmeticTask::demonstration_text): one generator seeded with `seed`
  // draws problem, then answer, then the next problem.
  std::vector<SftEpisode> demonstrations(int64_t count, uint64_t seed) const override;
  const ArithmeticProblem& problem() const { return problem_; }
  const ArithmeticTask& task() const { return task_; }

 private:
  EnvStep start(const ArithmeticProblem& problem);

  ArithmeticTask task_;
  ArithmeticProblem problem_;
  bool episode_open_ = false;
};

// The tallies an arithmetic answer adds to info "counts": whether it showed
// its work, and whether it did and was right. Drift grades the same answers.
nlohmann::json worked_answer_counts(std::string_view action, bool correct);
// One turn; room for the longest worked answer of max_digits-digit operands
// followed by `suffix_bytes` (drift's required suffix), and the longest prompt.
EnvLimits arithmetic_limits(int64_t max_digits, int64_t suffix_bytes);

// Reads the task section (name, min_digits, max_digits, operators,
// test_fraction, test_size, answer_format); unknown keys are errors.
ArithmeticConfig arithmetic_config_from_json(const nlohmann::json& config, const std::string& where);
// The task section arithmetic_config_from_json reads back, every key included.
nlohmann::json arithmetic_config_to_json(const ArithmeticConfig& config);
std::unique_ptr<Environment> make_arithmetic_environment(const nlohmann::json& config, const std::string& where);

}  // namespace sao::env
