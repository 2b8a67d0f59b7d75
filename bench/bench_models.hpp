// Model shapes and trajectory helpers shared by the benchmarks.
#pragma once

#include "algo/learner.hpp"
#include "algo/trajectory.hpp"
#include "model/model_config.hpp"
#include "model/transformer.hpp"

#include <random>
#include <vector>

namespace sao::bench {

// SmolLM2-135M's shape (hidden 576, 30 layers, 9 heads, 3 KV heads, vocab
// 49,152, tied embeddings), for random-weight stand-ins.
inline model::ModelConfig smollm2_135m_shape() {
  model::ModelConfig config;
  config.model_type = "llama";
  config.vocab_size = 49152;
  config.hidden_size = 576;
  config.intermediate_size = 1536;
  config.num_hidden_layers = 30;
  config.num_attention_heads = 9;
  config.num_key_value_heads = 3;
  config.max_position_embeddings = 8192;
  config.rope_theta = 100000.0;
  config.rms_norm_eps = 1e-5;
  config.tie_word_embeddings = true;
  return config;
}

// Sets every action token's behaviour log-prob to the policy's own, so the
// learner's importance ratios start at 1 as for an on-policy batch.
inline void use_own_logprobs(model::CausalLM& policy, algo::Trajectory& trajectory) {
  torch::NoGradGuard no_grad;
  const auto logprobs =
      algo::policy_outputs(policy, torch::tensor(trajectory.tokens, torch::kInt64).unsqueeze(0)).logprobs[0];
  for (size_t t = 0; t < trajectory.size(); ++t) {
    if (trajectory.action_mask[t]) trajectory.behaviour_logprobs[t] = logprobs[static_cast<int64_t>(t)].item<float>();
  }
}

// Multi-turn episodes like the maze's: a 9-token prompt, then 1 to 8 turns of
// 3 action tokens and an 8-token observation, so lengths run from 12 to 96
// tokens in one batch. Tokens are random; behaviour log-probs are the
// policy's own.
inline std::vector<algo::Trajectory> mixed_length_batch(model::CausalLM& policy, int64_t batch, uint64_t seed) {
  std::mt19937_64 random(seed);
  const auto token = [&random] { return static_cast<int64_t>(random() % 250 + 2); };
  std::vector<algo::Trajectory> trajectories;
  for (int64_t i = 0; i < batch; ++i) {
    std::vector<int64_t> prompt = {257};
    for (int k = 0; k < 8; ++k) prompt.push_back(token());
    std::vector<algo::Turn> turns(static_cast<size_t>(1 + i % 8));
    for (size_t k = 0; k < turns.size(); ++k) {
      turns[k].action_tokens = {token(), token(), token()};
      if (k + 1 < turns.size()) {
        for (int o = 0; o < 8; ++o) turns[k].observation.push_back(token());
      }
      turns[k].logprobs.assign(3, 0.0f);
      turns[k].versions.assign(3, 0);
    }
    auto trajectory = algo::make_trajectory(prompt, turns, static_cast<double>(random() % 2), true, i);
    use_own_logprobs(policy, trajectory);
    trajectories.push_back(std::move(trajectory));
  }
  return trajectories;
}

}  // namespace sao::bench
