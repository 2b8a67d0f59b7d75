// Model and generation tests: causality, the recorded log-probs are exact,
// and parameter groups freeze. The paged KV cache and the decode engine
// have tests/test_decode_engine.cpp.
#include "base/error.hpp"
#include "model/batched_matmul.hpp"
#include "model/generation.hpp"
#include "model/safetensors.hpp"
#include "model/transformer.hpp"

#include "test_tiny_model.hpp"

#include <doctest/doctest.h>
#include <cmath>
#include <nlohmann/json.hpp>

using sao::model::CausalLM;
using sao::model::ModelConfig;

namespace {

using sao_test::tiny_config;
using sao_test::tiny_policy;

torch::Tensor ids_tensor(const std::vector<int64_t>& ids) {
  return torch::tensor(ids, torch::kInt64).unsqueeze(0);
}

}  // namespace

TEST_CASE("parameter names follow Hugging Face Llama naming") {
  CausalLM policy(tiny_config());
  auto params = policy->named_parameters(true);
  CHECK(params.contains("model.embed_tokens.weight"));
  CHECK(params.contains("model.layers.1.self_attn.q_proj.weight"));
  CHECK(params.contains("model.layers.0.self_attn.k_proj.weight"));
  CHECK(params.contains("model.layers.0.mlp.gate_proj.weight"));
  CHECK(params.contains("model.layers.0.input_layernorm.weight"));
  CHECK(params.contains("model.layers.0.post_attention_layernorm.weight"));
  CHECK(params.contains("model.norm.weight"));
  CHECK(params.contains("lm_head.weight"));
  // GQA: 2 kv heads of dim 8.
  CHECK(params["model.layers.0.self_attn.k_proj.weight"].sizes() == torch::IntArrayRef({16, 32}));
  int64_t count = 0;
  for (auto& p : policy->parameters()) count += p.numel();
  CHECK(count == tiny_config().parameter_count());
}

TEST_CASE("changing a future token never changes earlier logits") {
  auto policy = tiny_policy();
  torch::NoGradGuard no_grad;
  auto a = policy->forward(ids_tensor({1, 5, 9, 3, 7, 2}));
  auto b = policy->forward(ids_tensor({1, 5, 9, 3, 30, 11}));
  CHECK(torch::equal(a.narrow(1, 0, 4), b.narrow(1, 0, 4)));
  CHECK_FALSE(torch::allclose(a.narrow(1, 4, 2), b.narrow(1, 4, 2)));
}

TEST_CASE("batched_matmul equals torch::matmul in values and gradients, for every layout attention gives it") {
  torch::manual_seed(3);
  struct Case {
    const char* name;
    torch::Tensor a, b;
  };
  auto base_k = torch::randn({3, 2, 9, 8});  // [B, KV, capacity, hd], as the KV cache holds keys
  std::vector<Case> cases = {
      {"contiguous", torch::randn({4, 5, 8}), torch::randn({4, 8, 6})},
      {"right transposed (q k^T)", torch::randn({3, 2, 4, 8}), base_k.narrow(2, 0, 7).transpose(-2, -1)},
      {"left transposed", torch::randn({4, 8, 5}).transpose(1, 2), torch::randn({4, 8, 6})},
      {"narrowed rows (weights v)", torch::randn({3, 2, 4, 7}), base_k.narrow(2, 0, 7)},
      {"not BLAS-shaped (copied)", torch::randn({4, 5, 16}).narrow(2, 0, 8).unsqueeze(0).expand({2, 4, 5, 8}),
       torch::randn({2, 4, 8, 3})},
      {"empty inner dimension", torch::randn({2, 3, 0}), torch::randn({2, 0, 4})},
  };
  for (auto& c : cases) {
    CAPTURE(std::string(c.name));
    auto expected = torch::matmul(c.a, c.b);
    auto actual = sao::model::batched_matmul(c.a, c.b);
    CHECK(actual.sizes() == expected.sizes());
    CHECK(torch::allclose(actual, expected, 1e-5, 1e-6));
    // Gradients through both operands against autograd's matmul. clone()
    // keeps a dense view's strides, so transposed operands stay transposed.
    auto a1 = c.a.detach().clone().requires_grad_(true);
    auto b1 = c.b.detach().clone().requires_grad_(true);
    auto a2 = c.a.detach().clone().requires_grad_(true);
    auto b2 = c.b.detach().clone().requires_grad_(true);
    auto weights = torch::randn(expected.sizes());
    (sao::model::batched_matmul(a1, b1) * weights).sum().backward();
    (torch::matmul(a2, b2) * weights).sum().backward();
    CHECK(torch::allclose(a1.grad(), a2.grad(), 1e-5, 1e-6));
    CHECK(torch::allclose(b1.grad(), b2.grad(), 1e-5, 1e-6));
  }
  CHECK_THROWS_WITH_AS(sao::model::batched_matmul(torch::randn({2, 3, 4}), torch::randn({2, 5, 4})),
                       "batched_matmul: shapes [2, 3, 4] and [2, 5, 4] do not multiply", sao::Error);
  CHECK_THROWS_WITH_AS(sao::model::batched_matmul(torch::randn({3, 4}), torch::randn({4, 3})),
                       "batched_matmul: need two tensors of the same rank >= 3, got 2 and 2", sao::Error);
}

TEST_CASE("grouped-query attention equals attention with each key head repeated per query head") {
  // Reference: the textbook form, keys and values repeated so every query
  // head has its own copy, written here with plain tensor ops.
  auto policy = tiny_policy();
  torch::NoGradGuard no_grad;
  const auto config = tiny_config();
  auto ids = ids_tensor({3, 9, 1, 30, 7});
  auto layer = policy->model->layers->ptr<sao::model::DecoderLayerImpl>(0);
  auto& attention = *layer->self_attn;
  auto x = policy->model->embed_tokens(ids);
  const int64_t steps = 5, heads = 4, kv_heads = 2, head_dim = config.head_dim();
  auto q = attention.q_proj(x).view({1, steps, heads, head_dim}).transpose(1, 2);
  auto k = attention.k_proj(x).view({1, steps, kv_heads, head_dim}).transpose(1, 2);
  auto v = attention.v_proj(x).view({1, steps, kv_heads, head_dim}).transpose(1, 2);
  auto positions = torch::arange(steps, torch::kFloat32).unsqueeze(-1) * sao::model::rotary_inverse_frequencies(config);
  auto angles = torch::cat({positions, positions}, -1);
  auto rotate = [&](const torch::Tensor& t) {
    auto half = head_dim / 2;
    auto rotated = torch::cat({-t.narrow(-1, half, half), t.narrow(-1, 0, half)}, -1);
    return t * angles.cos() + rotated * angles.sin();
  };
  q = rotate(q);
  k = rotate(k).repeat_interleave(heads / kv_heads, 1);
  v = v.repeat_interleave(heads / kv_heads, 1);
  auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(head_dim));
  scores = scores.masked_fill(torch::ones({steps, steps}, torch::kBool).triu(1), -INFINITY);
  auto expected = attention.o_proj(
      torch::matmul(torch::softmax(scores, -1), v).transpose(1, 2).reshape({1, steps, heads * head_dim}));
  const auto rotary = sao::model::rotary_angles(torch::arange(steps, torch::kInt64).unsqueeze(0),
                                                sao::model::rotary_inverse_frequencies(config));
  auto visible = torch::ones({steps, steps}, torch::kBool).tril().view({1, 1, steps, steps});
  auto actual = attention.forward(x, rotary, visible, nullptr);
  CHECK(torch::allclose(actual, expected, 1e-5, 1e-6));
}

TEST_CASE("returned log-probs equal log_softmax of a full forward pass at the sampled ids") {
  auto policy = tiny_policy();
  sao::model::SamplingConfig sampling;
  sampling.max_new_tokens = 10;
  sampling.stop_tokens = {2};
  const std::vector<std::vector<int64_t>> prompts = {{1, 5, 6}, {1, 7}, {1, 9, 9, 9, 9}};
  auto outputs = sao::model::generate(policy, prompts, sampling, /*seed=*/3, /*weight_version=*/4);
  torch::NoGradGuard no_grad;
  for (size_t row = 0; row < prompts.size(); ++row) {
    const auto& out = outputs[row];
    REQUIRE(!out.tokens.empty());
    CHECK(out.finish != sao::model::FinishReason::kRunning);
    std::vector<int64_t> sequence = prompts[row];
    sequence.insert(sequence.end(), out.tokens.begin(), out.tokens.end());
    auto log_probs = torch::log_softmax(policy->forward(ids_tensor(sequence))[0], -1);  // [T, V]
    for (size_t i = 0; i < out.tokens.size(); ++i) {
      const auto position = static_cast<int64_t>(prompts[row].size() + i - 1);
      CHECK(out.logprobs[i] == doctest::Approx(log_probs[position][out.tokens[i]].item<float>()).epsilon(1e-4));
      CHECK(out.versions[i] == 4);
    }
  }
}

TEST_CASE("per-sequence finish: stop tokens and max_new_tokens") {
  auto policy = tiny_policy();
  sao::model::SamplingConfig sampling;
  sampling.max_new_tokens = 5;
  sampling.temperature = 0.0;  // greedy: deterministic first token
  auto greedy = sao::model::generate(policy, {{1, 2, 3}}, sampling, 1);
  const int64_t first = greedy[0].tokens[0];
  CHECK(greedy[0].tokens.size() == 5);
  CHECK(greedy[0].finish == sao::model::FinishReason::kMaxNewTokens);
  CHECK(greedy[0].logprobs[0] == 0.0f);  // greedy is a point mass
  sampling.stop_tokens = {first};
  auto stopped = sao::model::generate(policy, {{1, 2, 3}, {4, 5}}, sampling, 1);
  CHECK(stopped[0].tokens.size() == 1);
  CHECK(stopped[0].finish == sao::model::FinishReason::kStopToken);
}

TEST_CASE("decoding stops when the context is full: no token ever sits past max_position_embeddings") {
  auto policy = tiny_policy();  // 64 positions
  sao::model::SamplingConfig sampling;
  sampling.max_new_tokens = 10;
  const std::vector<int64_t> prompt_62(62, 3);
  const std::vector<int64_t> prompt_64(64, 3);
  auto outputs = sao::model::generate(policy, {prompt_62, prompt_64, {1, 2}}, sampling, 1);
  CHECK(outputs[0].tokens.size() == 2);  // positions 62 and 63
  CHECK(outputs[0].finish == sao::model::FinishReason::kContextFull);
  CHECK(outputs[1].tokens.empty());  // the prompt took every position
  CHECK(outputs[1].finish == sao::model::FinishReason::kContextFull);
  CHECK(outputs[2].tokens.size() == 10);
  CHECK(outputs[2].finish == sao::model::FinishReason::kMaxNewTokens);
  // The full sequence is exactly the context, so the learner can score it.
  std::vector<int64_t> full(prompt_62);
  full.insert(full.end(), outputs[0].tokens.begin(), outputs[0].tokens.end());
  torch::NoGradGuard no_grad;
  CHECK(policy->forward(ids_tensor(full)).size(1) == 64);
}

TEST_CASE("sampling log-probs describe the actual sampling distribution") {
  auto logits = torch::tensor({2.0f, 1.0f, 0.0f, -1.0f}).unsqueeze(0);
  sao::model::SamplingConfig config;
  config.top_k = 2;
  auto top_k = sao::model::sampling_log_probs(logits, config)[0];
  const double z = std::log(std::exp(2.0) + std::exp(1.0));
  CHECK(top_k[0].item<float>() == doctest::Approx(2.0 - z));
  CHECK(top_k[1].item<float>() == doctest::Approx(1.0 - z));
  CHECK(std::isinf(top_k[2].item<float>()));
  config.top_k = 0;
  config.temperature = 2.0;
  auto tempered = sao::model::sampling_log_probs(logits, config)[0];
  CHECK(tempered[0].item<float>() == doctest::Approx(torch::log_softmax(logits / 2.0, 1)[0][0].item<float>()));
  config.temperature = 1.0;
  config.top_p = 0.5;  // p(top) = 0.64 > 0.5: only the top token remains
  auto nucleus = sao::model::sampling_log_probs(logits, config)[0];
  CHECK(nucleus[0].item<float>() == doctest::Approx(0.0));
  CHECK(std::isinf(nucleus[1].item<float>()));
}

TEST_CASE("frozen parameter groups do not change after an optimiser step") {
  sao::model::ValueModel critic(tiny_config());
  sao::model::init_weights(*critic, 3);
  CHECK(sao::model::set_group_trainable(*critic, sao::model::ParamGroup::kAttention, false) == 8);
  std::map<std::string, torch::Tensor> before;
  for (auto& item : critic->named_parameters(true)) before[item.key()] = item.value().detach().clone();
  torch::optim::AdamW optimizer(critic->parameters(), torch::optim::AdamWOptions(1e-2));
  auto values = critic->forward(ids_tensor({1, 2, 3, 4}));
  values.pow(2).sum().backward();
  // A fresh critic's head is zero, so give it a gradient path first.
  optimizer.step();
  optimizer.zero_grad();
  (critic->forward(ids_tensor({1, 2, 3, 4})) - 1.0).pow(2).sum().backward();
  optimizer.step();
  for (auto& item : critic->named_parameters(true)) {
    const bool attention = item.key().find(".self_attn.") != std::string::npos;
    const bool unchanged = torch::equal(item.value(), before[item.key()]);
    if (attention) {
      CHECK_MESSAGE(unchanged, item.key());
    } else if (item.key().find(".mlp.") != std::string::npos || item.key() == "score.weight") {
      CHECK_MESSAGE(!unchanged, item.key());
    }
  }
}

TEST_CASE("freezing a group the model lacks fails loudly") {
  torch::nn::Module head_only;
  head_only.register_module("score", torch::nn::Linear(4, 1));
  CHECK_THROWS_WITH(sao::model::set_group_trainable(head_only, sao::model::ParamGroup::kAttention, false),
                    "cannot freeze parameter group 'attention': the model has no parameter in it");
  CHECK(head_only.named_parameters(true)["score.weight"].requires_grad());
  CHECK_THROWS_WITH(sao::model::param_group_from_name("attn"),
                    "unknown parameter group 'attn' (known: attention, mlp, norm, embedding, head)");
}

TEST_CASE("a value model initialised from a policy copies the backbone, not the head") {
  auto policy = tiny_policy();
  sao::model::ValueModel critic(tiny_config());
  sao::model::init_value_from_policy(critic, policy);
  auto critic_params = critic->named_parameters(true);
  for (auto& item : policy->named_parameters(true)) {
    if (item.key().rfind("model.", 0) == 0) CHECK(torch::equal(item.value(), critic_params[item.key()]));
  }
  torch::NoGradGuard no_grad;
  CHECK(torch::equal(critic->forward(ids_tensor({1, 2, 3})), torch::zeros({1, 3})));
  // Separate storage: training the critic cannot move the policy.
  critic_params["model.norm.weight"].add_(1.0);
  CHECK_FALSE(torch::equal(policy->named_parameters(true)["model.norm.weight"], critic_params["model.norm.weight"]));
}

TEST_CASE("policy_tensor_shapes lists exactly what CausalLM registers, without building it") {
  auto qwen = tiny_config();
  qwen.model_type = "qwen2";
  qwen.attention_bias = true;
  auto tied = tiny_config();
  tied.tie_word_embeddings = true;
  tied.num_key_value_heads = 1;
  for (const auto& config : {tiny_config(), qwen, tied}) {
    CausalLM policy(config);
    std::vector<std::pair<std::string, std::vector<int64_t>>> registered;
    for (const auto& [name, tensor] : sao::model::named_tensors_of(*policy))
      registered.emplace_back(name, tensor.sizes().vec());
    CHECK(sao::model::policy_tensor_shapes(config) == registered);
  }
}

TEST_CASE("model sizes out of bounds are refused with the allowed range") {
  const auto error_for = [](const nlohmann::json& json) {
    try {
      sao::model::model_config_from_json(json, "checkpoint c/config.json", sao::model::ConfigKind::kHuggingFace);
    } catch (const sao::Error& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  CHECK(error_for({{"num_hidden_layers", 100000}}) ==
        "checkpoint c/config.json.num_hidden_layers: must be an integer in [1, 256], got 100000");
  CHECK(error_for({{"hidden_size", 65536}, {"num_attention_heads", 4}}) ==
        "checkpoint c/config.json.hidden_size: must be an integer in [1, 16384], got 65536");
  CHECK(error_for({{"vocab_size", 2000000}}) ==
        "checkpoint c/config.json.vocab_size: must be an integer in [1, 1048576], got 2000000");
  CHECK(error_for({{"intermediate_size", 0}}) ==
        "checkpoint c/config.json.intermediate_size: must be an integer in [1, 65536], got 0");
  CHECK(error_for({{"max_position_embeddings", 1 << 21}}) ==
        "checkpoint c/config.json.max_position_embeddings: must be an integer in [1, 1048576], got 2097152");
  CHECK(error_for({{"num_attention_heads", 512}}) ==
        "checkpoint c/config.json.num_attention_heads: must be an integer in [1, 256], got 512");
  CHECK(error_for({{"num_key_value_heads", -1}}) ==
        "checkpoint c/config.json.num_key_value_heads: must be an integer in [1, 256], got -1");
  CHECK(error_for({{"num_hidden_layers", 256}}) == "no error");
}
