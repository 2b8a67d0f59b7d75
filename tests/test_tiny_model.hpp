// The smallest model the actor and rollout tests run: one layer, width 32,
// sao's byte vocabulary. Fast enough to decode in a test, big enough to
// exercise grouped-query attention (2 query heads, 1 key head).
#pragma once

#include "model/model_config.hpp"

namespace sao_test {

inline sao::model::ModelConfig tiny_byte_model() {
  sao::model::ModelConfig config;
  config.hidden_size = 32;
  config.intermediate_size = 48;
  config.num_hidden_layers = 1;
  config.num_attention_heads = 2;
  config.num_key_value_heads = 1;
  config.max_position_embeddings = 64;
  return config;
}

}  // namespace sao_test
