// The smallest model the actor and rollout tests run: one layer, width 32,
// sao's byte vocabulary. Fast enough to decode in a test, big enough to
// exercise grouped-query attention (2 query heads, 1 key head).
#pragma once

#include "model/model_config.hpp"
#include "model/transformer.hpp"

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

// Two layers, 32-token vocabulary, 4 query heads over 2 key heads, 64
// positions, untied head: the model tests' shape.
inline sao::model::ModelConfig tiny_config() {
  sao::model::ModelConfig config;
  config.vocab_size = 32;
  config.hidden_size = 32;
  config.intermediate_size = 48;
  config.num_hidden_layers = 2;
  config.num_attention_heads = 4;
  config.num_key_value_heads = 2;
  config.max_position_embeddings = 64;
  config.tie_word_embeddings = false;
  return config;
}

// tiny_config's policy with its matrices 10x the default initialisation, so
// logits differ noticeably between tokens.
inline sao::model::CausalLM tiny_policy(uint64_t seed = 7) {
  sao::model::CausalLM policy(tiny_config());
  sao::model::init_weights(*policy, seed);
  torch::NoGradGuard no_grad;
  for (auto& p : policy->parameters()) {
    if (p.dim() == 2) p.mul_(10.0);
  }
  return policy;
}

// The learner tests' shape: one layer, 16-token vocabulary, 16 wide, untied head.
inline sao::model::ModelConfig tiny_learner_config() {
  sao::model::ModelConfig config;
  config.vocab_size = 16;
  config.hidden_size = 16;
  config.intermediate_size = 32;
  config.num_hidden_layers = 1;
  config.num_attention_heads = 2;
  config.num_key_value_heads = 1;
  config.max_position_embeddings = 32;
  config.tie_word_embeddings = false;
  return config;
}

struct LearnerModels {
  sao::model::CausalLM policy{nullptr};
  sao::model::ValueModel critic{nullptr};
};

// A policy from `seed` and, with `critic`, a critic initialised from it with
// a non-zero head (so that one update already moves the whole critic).
inline LearnerModels tiny_learner_models(uint64_t seed, bool critic = true) {
  LearnerModels m;
  m.policy = sao::model::CausalLM(tiny_learner_config());
  sao::model::init_weights(*m.policy, seed);
  if (!critic) return m;
  m.critic = sao::model::ValueModel(tiny_learner_config());
  sao::model::init_weights(*m.critic, seed + 1);
  sao::model::init_value_from_policy(m.critic, m.policy);
  torch::NoGradGuard no_grad;
  auto generator = at::detail::createCPUGenerator(seed + 2);
  m.critic->score->weight.normal_(0.0, 0.3, generator);
  return m;
}

}  // namespace sao_test
