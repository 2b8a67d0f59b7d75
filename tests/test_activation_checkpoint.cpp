// Activation checkpointing: a checkpointed training pass gives the same
// logits and the same parameter gradients as the plain one, and a learner
// with learner.activation_checkpointing takes the same steps.
#include "algo/learner.hpp"
#include "model/activation_checkpoint.hpp"
#include "model/transformer.hpp"
#include "test_tiny_model.hpp"

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <vector>

namespace {

std::vector<torch::Tensor> gradients_of(sao::model::CausalLM& policy, const torch::Tensor& ids) {
  for (auto& p : policy->parameters()) p.mutable_grad() = torch::Tensor();
  const auto logits = policy->forward(ids);
  (logits.pow(2).mean() + logits.narrow(2, 0, 3).sum() * 0.01).backward();
  std::vector<torch::Tensor> grads;
  for (auto& p : policy->parameters()) grads.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
  return grads;
}

}  // namespace

TEST_CASE("a checkpointed pass: same logits, same gradients") {
  auto policy = sao_test::tiny_policy(3);
  const auto ids = torch::randint(0, 32, {3, 20}, torch::kInt64);
  const auto plain_logits = policy->forward(ids).detach();
  const auto plain = gradients_of(policy, ids);
  policy->model->set_activation_checkpointing(true);
  CHECK(torch::allclose(policy->forward(ids).detach(), plain_logits, 0.0, 0.0));
  const auto checkpointed = gradients_of(policy, ids);
  REQUIRE(plain.size() == checkpointed.size());
  bool any_nonzero = false;
  for (size_t i = 0; i < plain.size(); ++i) {
    CHECK(torch::allclose(plain[i], checkpointed[i], 1e-5, 1e-7));
    any_nonzero = any_nonzero || plain[i].abs().max().item<double>() > 0;
  }
  CHECK(any_nonzero);
  // Without a graph (evaluation, decoding) nothing is checkpointed: the plain path runs.
  torch::NoGradGuard no_grad;
  CHECK(torch::equal(policy->forward(ids), plain_logits));
}

TEST_CASE("learner.activation_checkpointing: the same SAO steps") {
  auto batch_of = [](uint64_t seed) {
    std::vector<sao::algo::Trajectory> batch;
    for (int i = 0; i < 4; ++i) {
      sao::algo::Turn turn;
      for (int k = 0; k < 3 + i; ++k) turn.action_tokens.push_back(2 + (k * 5 + i * 3 + static_cast<int>(seed)) % 14);
      turn.logprobs.assign(turn.action_tokens.size(), -2.5f);
      turn.versions.assign(turn.action_tokens.size(), 0);
      batch.push_back(sao::algo::make_trajectory({1, 2}, {turn}, i % 2, true, i));
    }
    return batch;
  };
  std::vector<std::vector<torch::Tensor>> results;
  for (const bool checkpointing : {false, true}) {
    auto models = sao_test::tiny_learner_models(8);
    sao::algo::LearnerConfig config;
    config.critic_warmup_steps = 0;
    config.actor_lr = 1e-3;
    config.activation_checkpointing = checkpointing;
    sao::algo::Learner learner(config, models.policy, models.critic);
    for (uint64_t s = 0; s < 3; ++s) learner.step(batch_of(s));
    std::vector<torch::Tensor> weights;
    for (const auto& p : models.policy->parameters()) weights.push_back(p.detach().clone());
    for (const auto& p : models.critic->parameters()) weights.push_back(p.detach().clone());
    results.push_back(weights);
  }
  for (size_t i = 0; i < results[0].size(); ++i) CHECK(torch::allclose(results[0][i], results[1][i], 1e-5, 1e-7));
}
