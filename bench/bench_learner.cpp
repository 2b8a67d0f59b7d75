// The learner and the weight path on this machine, for the default model:
// a full SAO step (K critic updates + the DIS actor update) in trained
// tokens/s and as a fraction of the fp32 matmul rate measured in the same
// run, and what one weight switch costs (serialise on the learner, load on a
// rollout) against the memory copy rate measured in the same run.
#include "algo/learner.hpp"
#include "algo/trajectory.hpp"
#include "model/generation.hpp"
#include "model/tensor_blob.hpp"
#include "model/transformer.hpp"
#include "runtime/run_config.hpp"
#include "runtime/system_info.hpp"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// 2 x matmul weights per token per forward pass (attention over ~16
// positions is negligible at this length; see bench_model for the formula
// with attention).
double forward_flops_per_token(const sao::model::ModelConfig& config) {
  return 2.0 * static_cast<double>(config.parameter_count());
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

double memcpy_gbps(size_t bytes) {
  std::vector<char> from(bytes, 1), to(bytes);
  std::memcpy(to.data(), from.data(), bytes);  // warm-up
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) std::memcpy(to.data(), from.data(), bytes);
  return 5.0 * static_cast<double>(bytes) / seconds_since(start) / 1e9;
}

void weight_switch(const sao::model::ModelConfig& config, const char* label) {
  sao::model::CausalLM learner_copy(config), rollout_copy(config);
  sao::model::init_weights(*learner_copy, 1);
  const size_t bytes = static_cast<size_t>(config.parameter_count()) * sizeof(float);
  const int repeats = bytes > 100'000'000 ? 2 : 20;
  auto start = std::chrono::steady_clock::now();
  std::vector<sao::model::TensorBlob> blobs;
  for (int i = 0; i < repeats; ++i) blobs = sao::model::module_to_blobs(*learner_copy);
  const double serialise = seconds_since(start) / repeats;
  start = std::chrono::steady_clock::now();
  for (int i = 0; i < repeats; ++i) sao::model::load_blobs_into_module(*rollout_copy, blobs, "bench");
  const double load = seconds_since(start) / repeats;
  const double copy = memcpy_gbps(bytes);
  std::printf(
      "weight switch, %s (%.1f MB fp32): serialise %.2f ms (%.2f GB/s), load %.2f ms (%.2f GB/s); memcpy %.2f GB/s "
      "-> serialise+load = %.1fx one memcpy\n",
      label, static_cast<double>(bytes) / 1e6, serialise * 1e3, static_cast<double>(bytes) / serialise / 1e9,
      load * 1e3, static_cast<double>(bytes) / load / 1e9, copy,
      (serialise + load) / (static_cast<double>(bytes) / (copy * 1e9)));
}

}  // namespace

// Usage: bench_learner [BATCH=64] [STEPS=10]
int main(int argc, char** argv) {
  const int64_t batch = argc > 1 ? std::atoll(argv[1]) : 64;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 10;
  const auto config = sao::runtime::load_run_config("", {});
  sao::runtime::configure_threads(1);
  const double limit = sao::runtime::measure_matmul_gflops(1024, 5);
  std::printf("machine: %s, 1 thread, fp32 matmul 1024^2 = %.1f GFLOP/s (the limit below)\n",
              sao::runtime::detect_blas().name.c_str(), limit);
  std::printf("model: %lld parameters; learner: %s, critic_updates K=%lld\n",
              static_cast<long long>(config.model.parameter_count()),
              config.learner.uses_critic() ? "SAO (critic + DIS)" : "no critic",
              static_cast<long long>(config.learner.critic_updates));

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
  // Passes per token: policy forward+backward (3F), each critic update
  // forward+backward (3F), one critic forward for the fixed targets (F).
  const double K = static_cast<double>(learner_config.critic_updates);
  const double flops = (3.0 + 3.0 * K + 1.0) * forward_flops_per_token(config.model) * tokens;
  std::printf(
      "SAO step, batch %lld (%.0f tokens): %.1f ms/step, %.0f trained tokens/s, %.2f GFLOP/s = %.1f%% of the "
      "matmul limit\n",
      static_cast<long long>(batch), tokens, elapsed * 1e3, tokens / elapsed, flops / elapsed / 1e9,
      100.0 * flops / elapsed / 1e9 / limit);

  weight_switch(config.model, "default model");
  auto large = config.model;
  large.hidden_size = 768;
  large.intermediate_size = 2048;
  large.num_hidden_layers = 12;
  large.num_attention_heads = 12;
  large.num_key_value_heads = 4;
  weight_switch(large, "~100M-parameter model");
  return 0;
}
