// The learner on this machine, for the default model: a full SAO step (K
// critic updates + the DIS actor update) in trained tokens/s and as a
// fraction of the fp32 matmul rate measured in the same run. What a weight
// switch costs (serialise, send, load) is bench_weight_sync's job.
#include "algo/learner.hpp"
#include "algo/trajectory.hpp"
#include "base/allocator.hpp"
#include "bench_models.hpp"
#include "config/run_config.hpp"
#include "model/generation.hpp"
#include "model/transformer.hpp"
#include "model_flops.hpp"
#include "report/system_info.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Trajectories sampled from the policy itself (exact log-probs), with a
// random 0/1 outcome: the learner does exactly the work of a real step.
std::vector<sao::algo::Trajectory> sample_batch(sao::model::CausalLM& policy, int64_t batch, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t a = static_cast<int64_t>(random() % 90 + 10);
    const int64_t b = static_cast<int64_t>(random() % 90 + 10);
    std::vector<int64_t> prompt = {257};
    for (char c : std::to_string(a) + "+" + std::to_string(b) + "=") prompt.push_back(static_cast<unsigned char>(c));
    prompts.push_back(prompt);
  }
  sao::model::SamplingConfig sampling;
  sampling.max_new_tokens = 8;
  const auto sequences = sao::model::generate(policy, prompts, sampling, seed);
  std::vector<sao::algo::Trajectory> trajectories;
  for (size_t i = 0; i < sequences.size(); ++i) {
    trajectories.push_back(
        sao::algo::trajectory_from_generation(prompts[i], sequences[i], static_cast<double>(random() % 2), true));
  }
  return trajectories;
}

void mark_current(std::vector<sao::algo::Trajectory>& trajectories, int64_t version) {
  for (auto& trajectory : trajectories) {
    for (size_t t = 0; t < trajectory.size(); ++t) {
      if (trajectory.action_mask[t]) trajectory.policy_versions[t] = version;
    }
  }
}

// Length buckets against one padded batch on the same mixed-length
// trajectories, alternating step by step so both see the same machine.
int bench_mixed_lengths(const sao::config::RunConfig& config, int64_t batch, int steps) {
  auto learner_config = config.learner;
  learner_config.critic_warmup_steps = 0;
  struct Side {
    const char* name;
    int64_t buckets;
    std::unique_ptr<sao::algo::Learner> learner;
    std::vector<double> seconds;
  };
  std::vector<Side> sides;
  sides.push_back({"padded to the longest (max_length_buckets 1)", 1, nullptr, {}});
  sides.push_back({"length buckets (max_length_buckets 4)", 4, nullptr, {}});
  std::vector<sao::algo::Trajectory> trajectories;
  for (auto& side : sides) {
    sao::model::CausalLM policy(config.model);
    sao::model::init_weights(*policy, 1);
    sao::model::ValueModel critic(config.model);
    sao::model::init_value_from_policy(critic, policy);
    if (trajectories.empty()) trajectories = sao::bench::mixed_length_batch(policy, batch, 7);
    auto side_config = learner_config;
    side_config.max_length_buckets = side.buckets;
    side.learner = std::make_unique<sao::algo::Learner>(side_config, policy, critic);
    mark_current(trajectories, 0);
    side.learner->step(trajectories);  // warm-up
  }
  double tokens = 0;
  for (const auto& trajectory : trajectories) tokens += static_cast<double>(trajectory.size());
  double passes = 0;
  for (int i = 0; i < steps; ++i) {
    for (auto& side : sides) {
      mark_current(trajectories, side.learner->policy_version());
      const auto start = std::chrono::steady_clock::now();
      const auto result = side.learner->step(trajectories);
      side.seconds.push_back(seconds_since(start));
      if (side.buckets > 1) passes = result.metrics.at("length_buckets");
    }
  }
  std::printf("mixed lengths: %lld episodes of 1-8 turns, %.0f real tokens (12-96 per episode), %d steps each\n",
              static_cast<long long>(batch), tokens, steps);
  std::vector<double> medians;
  for (auto& side : sides) {
    std::sort(side.seconds.begin(), side.seconds.end());
    medians.push_back(side.seconds[side.seconds.size() / 2]);
    std::printf("  %-46s median %.1f ms/step (min %.1f, max %.1f)\n", side.name, medians.back() * 1e3,
                side.seconds.front() * 1e3, side.seconds.back() * 1e3);
  }
  std::printf("  buckets used: %.0f; padded / bucketed step time: %.2fx\n", passes, medians[0] / medians[1]);
  return 0;
}

// Activation checkpointing: the same mixed-length steps with the layers
// recomputed in backward, then without. Peak resident memory is read after
// each (checkpointed first: the peak only grows, so the plain run's extra
// over it is what checkpointing saves) and step times are compared.
int bench_checkpointing(const sao::config::RunConfig& config, int64_t batch, int steps) {
  auto policy_seed = sao::model::CausalLM(config.model);
  sao::model::init_weights(*policy_seed, 1);
  const auto trajectories = sao::bench::mixed_length_batch(policy_seed, batch, 7);
  double tokens = 0;
  for (const auto& trajectory : trajectories) tokens += static_cast<double>(trajectory.size());
  std::printf("activation checkpointing, %lld mixed-length trajectories (%.0f tokens) a step, %d steps each:\n",
              static_cast<long long>(batch), tokens, steps);
  double seconds[2] = {0, 0};
  long peak_kb[2] = {0, 0};
  for (const bool checkpointing : {true, false}) {
    auto policy = sao::model::clone_policy(policy_seed);
    sao::model::ValueModel critic(config.model);
    sao::model::init_value_from_policy(critic, policy);
    auto learner_config = config.learner;
    learner_config.critic_warmup_steps = 0;
    learner_config.activation_checkpointing = checkpointing;
    sao::algo::Learner learner(learner_config, policy, critic);
    learner.step(trajectories);  // warm-up
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) learner.step(trajectories);
    const int side = checkpointing ? 0 : 1;
    seconds[side] = seconds_since(start) / steps;
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    peak_kb[side] = usage.ru_maxrss;
    std::printf("  %-24s %.1f ms/step, peak resident %.1f MB\n", checkpointing ? "checkpointed layers" : "plain",
                seconds[side] * 1e3, static_cast<double>(peak_kb[side]) / 1024.0);
  }
  std::printf("  plain's peak over checkpointed's: +%.1f MB; step time checkpointed / plain: %.2fx\n",
              static_cast<double>(peak_kb[1] - peak_kb[0]) / 1024.0, seconds[0] / seconds[1]);
  return 0;
}

}  // namespace

// Usage: bench_learner [BATCH=64] [STEPS=10] [mixed|checkpointing]
//   mixed: multi-turn episodes of mixed lengths, length buckets vs one padded batch
//   checkpointing: the same steps with and without learner.activation_checkpointing
int main(int argc, char** argv) {
  sao::base::keep_freed_memory_for_reuse();  // as sao itself runs
  const int64_t batch = argc > 1 ? std::atoll(argv[1]) : 64;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 10;
  const auto config = sao::config::load_run_config("", {});
  sao::report::configure_threads(1);
  const double limit = sao::report::measure_matmul_gflops(1024, 10);
  std::printf("machine: %s, 1 thread, fp32 matmul 1024^2 = %.1f GFLOP/s (the limit below)\n",
              sao::report::detect_blas().name.c_str(), limit);
  std::printf("model: %lld parameters; learner: %s, critic_updates K=%lld\n",
              static_cast<long long>(config.model.parameter_count()),
              config.learner.uses_critic() ? "SAO (critic + DIS)" : "no critic",
              static_cast<long long>(config.learner.critic_updates));

  if (argc > 3 && std::string(argv[3]) == "mixed") return bench_mixed_lengths(config, batch, steps);
  if (argc > 3 && std::string(argv[3]) == "checkpointing") return bench_checkpointing(config, batch, steps);

  sao::model::CausalLM policy(config.model);
  sao::model::init_weights(*policy, 1);
  sao::model::ValueModel critic(config.model);
  sao::model::init_value_from_policy(critic, policy);
  auto learner_config = config.learner;
  learner_config.critic_warmup_steps = 0;  // time full steps (critic + actor) only
  sao::algo::Learner learner(learner_config, policy, critic);
  auto trajectories = sample_batch(policy, batch, 7);
  learner.step(trajectories);  // warm-up
  double tokens = 0;
  for (const auto& trajectory : trajectories) tokens += static_cast<double>(trajectory.size());
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) {
    for (auto& trajectory : trajectories) {
      for (size_t t = 0; t < trajectory.size(); ++t) {
        if (trajectory.action_mask[t]) trajectory.policy_versions[t] = learner.policy_version();
      }
    }
    learner.step(trajectories);
  }
  const double elapsed = seconds_since(start) / steps;
  const double flops =
      sao::bench::sao_step_flops_per_token(config.model, tokens / batch / 2.0, learner_config.critic_updates,
                                           learner_config.freeze_critic_attention) *
      tokens;
  std::printf(
      "SAO step, batch %lld (%.0f tokens): %.1f ms/step, %.0f trained tokens/s, %.2f GFLOP/s = %.1f%% of the "
      "matmul limit\n",
      static_cast<long long>(batch), tokens, elapsed * 1e3, tokens / elapsed, flops / elapsed / 1e9,
      100.0 * flops / elapsed / 1e9 / limit);

  return 0;
}
