// pass@k on the held-out split: how often a policy solves a problem in k
// sampled attempts, next to its greedy pass@1. Reinforcement learning with a
// verifier can lift greedy pass@1 toward what sampling already finds, so the
// gap between the two is the headroom a task leaves for RL (issue #18).
#pragma once

#include "config/run_config.hpp"
#include "model/transformer.hpp"

#include <cstdint>
#include <map>
#include <vector>

namespace sao::train {

// The unbiased estimator of Chen et al. (2021, "Evaluating Large Language
// Models Trained on Code"): with n samples of which c are correct, the chance
// that k drawn without replacement hold at least one correct one,
// 1 - C(n-c, k) / C(n, k), computed as a product so it never overflows.
// Throws sao::Error unless 0 <= c <= n and 1 <= k <= n.
double pass_at_k_estimate(int64_t samples, int64_t correct, int64_t k);

struct PassAtKResult {
  int64_t problems = 0;
  int64_t samples_per_problem = 0;
  double temperature = 0.0;
  double greedy_accuracy = 0.0;  // pass@1 at eval.temperature (greedy by default)
  // k -> mean over problems of the estimate, for k = 1, 2, 4, ... up to the
  // sample count (which is always included).
  std::map<int64_t, double> pass_at;
  std::vector<int64_t> correct_per_problem;  // c of each held-out problem, in split order
  double seconds = 0.0;
};

// Greedy held-out accuracy, then `samples` sampled attempts per held-out
// problem at `temperature`, each round with its own seed. Works for the
// arithmetic task and for every environment with a held-out split.
// Throws sao::Error for samples < 1, temperature <= 0, or a task without a
// held-out split.
// `learner_step` is passed on as in evaluate_heldout.
PassAtKResult evaluate_pass_at_k(model::CausalLM& policy, const config::RunConfig& config, int64_t samples,
                                 double temperature, int64_t learner_step);

}  // namespace sao::train
