// FLOP counts shared by the benchmarks, so every "fraction of the matmul
// limit" they print uses the same arithmetic.
#pragma once

#include "model/model_config.hpp"

namespace sao::bench {

// Matmul FLOPs per token of a forward pass: 2 * (weights used in matmuls)
// plus attention scores and mixing over `context` keys.
inline double forward_flops_per_token(const model::ModelConfig& config, double context) {
  const double matmul_weights =
      static_cast<double>(config.parameter_count()) -
      static_cast<double>(config.num_hidden_layers * 2 * config.hidden_size +
                          config.hidden_size) -  // norms are not matmuls
      (config.tie_word_embeddings ? 0.0          // a tied embedding is the LM head matmul
                                  : static_cast<double>(config.vocab_size * config.hidden_size));
  const double attention = 4.0 * static_cast<double>(config.num_hidden_layers * config.hidden_size) * context;
  return 2.0 * matmul_weights + attention;
}

// The attention projections' weights (q, k, v, o) of every layer.
inline double attention_projection_weights(const model::ModelConfig& config) {
  const double q_dim = static_cast<double>(config.num_attention_heads * config.head_dim());
  const double kv_dim = static_cast<double>(config.num_key_value_heads * config.head_dim());
  const double d = static_cast<double>(config.hidden_size);
  return static_cast<double>(config.num_hidden_layers) * (2.0 * d * q_dim + 2.0 * d * kv_dim);
}

// The critic's forward per token: the policy's backbone with the value head
// (hidden_size -> 1) in place of the LM head.
inline double critic_forward_flops_per_token(const model::ModelConfig& config, double context) {
  const double lm_head = static_cast<double>(config.vocab_size * config.hidden_size);
  return forward_flops_per_token(config, context) - 2.0 * lm_head + 2.0 * static_cast<double>(config.hidden_size);
}

// One SAO learner step per trained token, counted pass by pass as
// algo::Learner runs it: K critic updates (forward + backward; the first
// forward also gives the fixed targets), a fresh critic forward for the
// advantages, and the policy update (forward + backward); with K = 0 a
// separate forward gives the targets. A backward costs two forwards
// (activation and weight gradients), less the weight gradients of frozen
// parameters (the critic's attention by default).
inline double sao_step_flops_per_token(const model::ModelConfig& config, double context, int64_t critic_updates,
                                       bool critic_attention_frozen) {
  const double policy = forward_flops_per_token(config, context);
  const double critic = critic_forward_flops_per_token(config, context);
  const double frozen = critic_attention_frozen ? 2.0 * attention_projection_weights(config) : 0.0;
  const double critic_forwards_without_backward = critic_updates > 0 ? 1.0 : 2.0;
  return 3.0 * policy + static_cast<double>(critic_updates) * (3.0 * critic - frozen) +
         critic_forwards_without_backward * critic;
}

}  // namespace sao::bench
