// Model shapes and trajectory helpers shared by the benchmarks.
#pragma once

#include "algo/learner.hpp"
#include "algo/trajectory.hpp"
#include "model/model_config.hpp"
#include "model/transformer.hpp"

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

}  // namespace sao::bench
