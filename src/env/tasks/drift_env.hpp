// The drifting environment: arithmetic whose required answer style changes
// with training progress, to measure how fast an async RL loop re-adapts.
//
// A regime is an answer style: "plain" ("12+34=" -> "46"), "reversed" (digits
// least significant first, sign first: "64"), optionally followed by a
// required suffix after a '+': "plain+!" wants "46!"; and optionally, after an
// '@', the operators its training problems use: "plain@-" asks only
// subtractions (a shift in what is asked rather than in how to answer). The
// held-out split always covers every configured operator. The regime in force at
// learner step s is regimes[(s / switch_every) % regimes.size()]; the runtime
// reports steps through on_training_step(). An episode keeps the regime it
// started with (on_training_step mid-episode changes the NEXT episode). The
// prompt never says which regime is active: the policy must notice from its
// rewards. One turn, reward 1 for an exact answer in the active style, else 0;
// a worked answer ("w24>42", see ArithmeticConfig::demonstration_worked_rate)
// is graded by the text after its last '>', as arithmetic grades it;
// info {"accuracy", "counts" (worked_answer_counts), "regime", "regime_index",
// "answer"} on the step.
//
// Config keys: name ("drift"), switch_every (50), regimes (["plain",
// "reversed"]), demonstration_regimes ("current": SFT demonstrations answer in
// the regime in force; "all": each demonstration in a regime drawn uniformly,
// so the warm-started policy samples every style and a switch is followed by
// rewards it can learn from), and the arithmetic keys min_digits (1), max_digits (2),
// operators ("+-"), test_fraction (0.1), test_size (400), demonstration_slip_rate
// and demonstration_worked_rate (0; the teacher of plain regimes' demonstrations,
// as in arithmetic: the same problems give the same held-out split, so a warm
// start of the default arithmetic task can start a drift run). The held-out split
// is the arithmetic test split (reset_heldout(i) = test_set()[i]), graded in
// the current regime.
//
// Recovery after a switch (recovery_after_switches): for a per-learner-step
// reward series r[0..n) (r[t] = mean reward of the batch at step t) and the
// steps s at which a new regime took effect (r[s] is the first reward under
// it), with window W:
//   pre-switch level  L = mean(r[max(s - W, previous switch) .. s - 1])
//   moving average    M(t) = mean(r[t - W + 1 .. t]), only for t >= s + W - 1,
//                     i.e. windows made entirely of post-switch steps
//   recovered at the first t < (next switch or n) with M(t) >= L - tolerance
//   (compared with a 1e-12 slack for rounding); steps_to_recover = t - s + 1,
//   so the smallest possible value is W. -1: not recovered before the next
//   switch or the end of the series.
#pragma once

#include "env/environment.hpp"
#include "env/tasks/arithmetic.hpp"

#include <random>
#include <string>
#include <vector>

namespace sao::env {

struct DriftConfig {
  ArithmeticConfig task;  // answer_format is ignored: the regime decides
  int64_t switch_every = 50;
  std::vector<std::string> regimes = {"plain", "reversed"};
  std::string demonstration_regimes = "current";  // "current" | "all"
};

// One regime, parsed from STYLE[+SUFFIX][@OPERATORS], STYLE "plain" or "reversed".
struct DriftRegime {
  std::string name;
  std::string answer_format;  // "plain" | "reversed"
  std::string suffix;
  std::string operators;  // empty: the task's operators
  static DriftRegime parse(const std::string& text, const std::string& where);
  std::string target(const ArithmeticProblem& problem) const;
  // Whitespace-trimmed exact match of the answer (a worked one's text after its last '>').
  bool accepts(const ArithmeticProblem& problem, const std::string& action) const;
  // A warm-start answer: in a plain regime the task's teacher
  // (ArithmeticTask::demonstration_text) plus the suffix, else target().
  std::string demonstration(const ArithmeticTask& task, const ArithmeticProblem& problem, std::mt19937_64& rng) const;
};

class DriftEnvironment final : public Environment {
 public:
  explicit DriftEnvironment(DriftConfig config);

  EnvStep reset(uint64_t seed) override;
  EnvStep step(const std::string& action) override;
  // The one spelling of its name: registry, config section, name().
  static constexpr const char* kName = "drift";
  std::string name() const override { return kName; }
  int64_t heldout_size() const override { return static_cast<int64_t>(task_.test_set().size()); }
  EnvStep reset_heldout(int64_t index) override;
  void on_training_step(int64_t learner_step) override;
  EnvLimits limits() const override;
  // In the current regime, or in uniformly drawn regimes (demonstration_regimes "all").
  std::vector<SftEpisode> demonstrations(int64_t count, uint64_t seed) const override;

  int64_t regime_index_at(int64_t learner_step) const;
  int64_t regime_index() const { return regime_index_at(learner_step_); }
  const DriftRegime& regime() const { return regimes_[static_cast<size_t>(regime_index())]; }
  // Learner steps in [1, total_steps) at which the regime changes.
  std::vector<int64_t> switch_steps(int64_t total_steps) const;

 private:
  EnvStep start(const ArithmeticProblem& problem);

  DriftConfig config_;
  ArithmeticTask task_;
  std::vector<DriftRegime> regimes_;
  std::vector<ArithmeticTask> regime_tasks_;  // training problems of each regime (its operators)
  int64_t learner_step_ = 0;
  ArithmeticProblem problem_;
  int64_t episode_regime_ = 0;
  bool open_ = false;
};

struct Recovery {
  int64_t switch_step = 0;
  double pre_level = 0.0;
  int64_t steps_to_recover = -1;  // -1: not recovered in the data
};

// See the header comment for the exact definition. Throws sao::Error when
// window < 1, switch steps are not strictly increasing, or a switch step is
// outside [1, rewards.size()).
std::vector<Recovery> recovery_after_switches(const std::vector<double>& rewards,
                                              const std::vector<int64_t>& switch_steps, int64_t window,
                                              double tolerance = 0.0);

DriftConfig drift_config_from_json(const nlohmann::json& config, const std::string& where);
std::unique_ptr<Environment> make_drift_environment(const nlohmann::json& config, const std::string& where);

}  // namespace sao::env
