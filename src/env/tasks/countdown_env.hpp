// Countdown: reach a target number with the numbers given, each used once.
// The default run's task (#18), chosen by measurement: after the warm start
// a tiny model's greedy answer is right about half the time while one of 8
// samples is right about 90% of the time (docs/decisions.md "Headroom for
// RL, measured"), and the problem space (ordered number tuples x targets) is
// far too large to memorise. Most problems have several solutions; the
// demonstrations show one drawn at random, so the warm start learns a mixture
// of solution orders, and a verifier that accepts every correct expression
// lets RL settle on the ones the model computes reliably.
//
//   reset(7)  -> "12 3 7=29:"           (numbers in the order drawn, '=', target, ':')
//   step("3*7+12")  -> reward 1, terminated, info {"accuracy": 1, "success": true}
//   step("3*7+11")  -> reward 0, reason "uses 11, which is not one of the numbers left"
//
// Rules. The action (ASCII whitespace ignored) is an expression over
// non-negative integers with + - * and parentheses; every given number is
// used exactly once (as a multiset) and no other number appears; '-' is
// only a binary operator (no negation); the value, in 64-bit arithmetic with
// the usual precedence, equals the target. Anything else scores 0 with a
// reason naming what was wrong.
//
// Problems. The numbers are drawn independently and uniformly from
// [min_number, max_number]; the target is drawn uniformly among the values in
// [min_target, max_target] that an expression without parentheses reaches
// (so every problem has a solution the demonstrations can show). The split
// hashes the problem's text: held-out problems (hash under test_fraction)
// never come from reset(), reset_heldout(i) gives only them, the same on
// every run and platform.
//
// Turns. With max_turns > 1 a wrong answer is not the end: the verifier's
// reason comes back as the next observation ("equals 22, not 33:") and the
// policy tries again, until it is right (reward 1) or out of turns (reward
// 0). Success counts at any turn. Using the verifier's feedback on one's own
// mistakes is a skill demonstrations teach poorly (they show someone else's
// mistakes) and RL teaches from the policy's own (cf. Kumar et al. 2024,
// "Training language models to self-correct via RL").
//
// Warm start: demonstrations() show, for a training problem, one of its
// parenthesis-free solutions drawn uniformly. With max_turns > 1, each
// demonstration first shows, with probability retry_demonstration_rate per
// turn left, a wrong parenthesis-free attempt (kept as context, not trained:
// train = false) and the verifier's answer to it, so the warm start knows the
// turn format without learning to make mistakes.
//
// Config keys (the task section): name ("countdown"), numbers (3),
// min_number (1), max_number (20), operators ("+-*"), min_target (0),
// max_target (99), max_turns (1), retry_demonstration_rate (0.0),
// test_fraction (0.1), heldout_size (400).
#pragma once

#include "env/environment.hpp"

#include <random>
#include <string>
#include <vector>

namespace sao::env {

struct CountdownConfig {
  int64_t numbers = 3;
  int64_t min_number = 1;
  int64_t max_number = 20;
  std::string operators = "+-*";
  int64_t min_target = 0;
  int64_t max_target = 99;
  int64_t max_turns = 1;
  double retry_demonstration_rate = 0.0;
  double test_fraction = 0.1;
  int64_t heldout_size = 400;
};

struct CountdownProblem {
  std::vector<int64_t> numbers;  // in the order shown
  int64_t target = 0;

  std::string prompt() const;  // "12 3 7=29:"
};

// A verifier's verdict on one action.
struct CountdownVerdict {
  bool correct = false;
  std::string reason;  // "correct", or what was wrong
};
CountdownVerdict verify_countdown(const CountdownProblem& problem, const std::string& action);

// Every parenthesis-free expression over a permutation of the numbers with
// the given operators whose value is `target` (each written once, sorted).
std::vector<std::string> countdown_solutions(const CountdownProblem& problem, const std::string& operators);

class CountdownEnvironment final : public Environment {
 public:
  explicit CountdownEnvironment(CountdownConfig config);  // builds the held-out set

  EnvStep reset(uint64_t seed) override;
  EnvStep step(const std::string& action) override;
  // The one spelling of its name: registry, config section, name().
  static constexpr const char* kName = "countdown";
  std::string name() const override { return kName; }
  int64_t heldout_size() const override { return static_cast<int64_t>(heldout_.size()); }
  EnvStep reset_heldout(int64_t index) override;
  EnvLimits limits() const override;
  std::vector<SftEpisode> demonstrations(int64_t count, uint64_t seed) const override;

  bool is_heldout(const CountdownProblem& problem) const;
  // A training problem; the same seed gives the same problem.
  CountdownProblem sample_train(uint64_t seed) const;
  const CountdownConfig& config() const { return config_; }

 private:
  CountdownProblem sample_problem(std::mt19937_64& rng) const;
  EnvStep start(const CountdownProblem& problem);

  CountdownConfig config_;
  std::vector<CountdownProblem> heldout_;
  CountdownProblem problem_;
  int64_t turn_ = 0;
  bool open_ = false;
};

// Throws sao::Error naming `where` and the key for bad config.
CountdownConfig countdown_config_from_json(const nlohmann::json& config, const std::string& where);
std::unique_ptr<Environment> make_countdown_environment(const nlohmann::json& config, const std::string& where);

}  // namespace sao::env
