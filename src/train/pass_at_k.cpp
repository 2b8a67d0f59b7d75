// pass@k on the held-out split; see pass_at_k.hpp.
#include "train/pass_at_k.hpp"

#include "base/error.hpp"
#include "base/hash.hpp"
#include "train/task_runner.hpp"

#include <chrono>
#include <cmath>
#include <string>

namespace sao::train {

double pass_at_k_estimate(int64_t samples, int64_t correct, int64_t k) {
  if (samples < 1 || correct < 0 || correct > samples || k < 1 || k > samples) {
    throw Error("pass_at_k_estimate: need 0 <= correct <= samples and 1 <= k <= samples, got samples " +
                std::to_string(samples) + ", correct " + std::to_string(correct) + ", k " + std::to_string(k));
  }
  // Fewer than k wrong samples: every draw of k holds a correct one.
  if (samples - correct < k) return 1.0;
  // C(n-c, k) / C(n, k) = prod_{i = n-k+1}^{n} (1 - c / i).
  double all_wrong = 1.0;
  for (int64_t i = samples - k + 1; i <= samples; ++i) {
    all_wrong *= 1.0 - static_cast<double>(correct) / static_cast<double>(i);
  }
  return 1.0 - all_wrong;
}

PassAtKResult evaluate_pass_at_k(model::CausalLM& policy, const config::RunConfig& config, int64_t samples,
                                 double temperature, int64_t learner_step) {
  if (samples < 1) throw Error("pass@k: the number of samples must be >= 1, got " + std::to_string(samples));
  if (!(temperature > 0.0) || !std::isfinite(temperature)) {
    throw Error("pass@k: the sampling temperature must be a finite number > 0, got " + std::to_string(temperature));
  }
  const auto start = std::chrono::steady_clock::now();
  PassAtKResult result;
  result.samples_per_problem = samples;
  result.temperature = temperature;
  EnvironmentPool pool;  // one set of environment processes for every round
  const auto greedy = evaluate_heldout(policy, config, learner_step, &pool);
  if (greedy.total == 0) throw Error("pass@k: task '" + config.env.name + "' has no held-out split");
  result.problems = greedy.total;
  result.greedy_accuracy = greedy.accuracy;
  result.correct_per_problem.assign(static_cast<size_t>(greedy.total), 0);

  auto sampled = config;
  sampled.eval.temperature = temperature;
  for (int64_t round = 0; round < samples; ++round) {
    // Every round its own stream, distinct from the greedy pass's and from
    // the other rounds' (splitmix64 is a bijection); kept non-negative for
    // the config's signed seed.
    sampled.run.seed = static_cast<int64_t>(
        base::splitmix64(static_cast<uint64_t>(config.run.seed) * 1000003ULL + static_cast<uint64_t>(round)) >> 1);
    const auto attempt = evaluate_heldout(policy, sampled, learner_step, &pool);
    if (attempt.solved.size() != result.correct_per_problem.size()) {
      throw Error("pass@k: round " + std::to_string(round) + " scored " + std::to_string(attempt.solved.size()) +
                  " held-out problems, the greedy pass " + std::to_string(result.correct_per_problem.size()));
    }
    for (size_t i = 0; i < attempt.solved.size(); ++i) result.correct_per_problem[i] += attempt.solved[i];
  }
  std::vector<int64_t> ks;
  for (int64_t k = 1; k < samples; k *= 2) ks.push_back(k);
  ks.push_back(samples);
  for (const auto k : ks) {
    double sum = 0.0;
    for (const auto correct : result.correct_per_problem) sum += pass_at_k_estimate(samples, correct, k);
    result.pass_at[k] = sum / static_cast<double>(result.problems);
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace sao::train
