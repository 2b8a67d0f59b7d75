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

}  // namespace sao::bench
