// The memory estimate that stops a run too large for the machine before it
// allocates anything: the default run is small, a huge model is refused
// with the estimate and its parts, and the estimate grows with what it counts.
#include "base/error.hpp"
#include "config/run_config.hpp"
#include "train/memory_estimate.hpp"

#include <doctest/doctest.h>

namespace {
sao::config::RunConfig config_with(const std::vector<std::string>& overrides) {
  return sao::config::load_run_config("", overrides);
}
}  // namespace

TEST_CASE("the default run's estimate is small, and a huge model is refused with the estimate") {
  const auto small = sao::train::estimate_train_memory(config_with({}));
  CHECK(small.bytes > 0);
  CHECK(small.bytes < (int64_t{1} << 30));
  CHECK_NOTHROW(sao::train::require_memory(small, int64_t{8} << 30, "default"));
  const auto huge = sao::train::estimate_train_memory(
      config_with({"model.hidden_size=16384", "model.intermediate_size=65536", "model.num_hidden_layers=64",
                   "model.num_attention_heads=128", "model.num_key_value_heads=128"}));
  CHECK(huge.bytes > (int64_t{100} << 30));
  CHECK_THROWS_WITH_AS(sao::train::require_memory(huge, int64_t{24} << 30, "big.json"),
                       doctest::Contains("big.json: the run needs about"), sao::Error);
  CHECK_THROWS_WITH_AS(sao::train::require_memory(huge, int64_t{24} << 30, "big.json"),
                       doctest::Contains("but 24.0 GiB of memory is available"), sao::Error);
  CHECK(huge.breakdown.find("learner models") != std::string::npos);
  // Unknown available memory: no refusal on a guess.
  CHECK_NOTHROW(sao::train::require_memory(huge, -1, "big.json"));
}

TEST_CASE("the estimate grows with replicas, batch and context") {
  const auto base = sao::train::estimate_train_memory(config_with({}));
  CHECK(sao::train::estimate_train_memory(config_with({"rollout.num_actors=4"})).bytes > base.bytes);
  CHECK(sao::train::estimate_train_memory(config_with({"replay.max_batch=256", "replay.capacity=256"})).bytes >
        base.bytes);
  CHECK(sao::train::estimate_train_memory(config_with({"model.max_position_embeddings=512"})).bytes > base.bytes);
  CHECK(sao::train::estimate_sft_memory(config_with({"sft.batch_size=128"})).bytes >
        sao::train::estimate_sft_memory(config_with({})).bytes);
  CHECK(sao::train::available_memory_bytes() > 0);  // /proc/meminfo on Linux
}

TEST_CASE("a bf16 rollout replica counts its weights and KV pool at 2 bytes an element") {
  const auto fp32 = config_with({"rollout.num_actors=3"});
  const auto bf16 = config_with({"rollout.num_actors=3", "rollout.weights_dtype=\"bf16\""});
  const auto& model = fp32.model;
  const int64_t kv_elements = fp32.rollout.kv_pool_tokens(model.max_position_embeddings) * 2 * model.num_hidden_layers *
                              model.num_key_value_heads * model.head_dim();
  // Half of 4 bytes an element off every replica's weights and pool; the learner is unchanged.
  CHECK(sao::train::estimate_train_memory(fp32).bytes - sao::train::estimate_train_memory(bf16).bytes ==
        3 * 2 * (model.parameter_count() + kv_elements));
}

TEST_CASE("a learner rank's memory: each switch takes off what it should, and the advice names the first fit") {
  sao::model::ModelConfig model;  // sao's default byte model
  const double p = static_cast<double>(model.parameter_count()) * 4.0;
  const int64_t batch_tokens = 65536;
  // Activations per token: 16 hidden + 3 intermediate values a layer, and 2 x vocabulary (logits), fp32.
  auto activations = [&](double tokens, int64_t layers) {
    return tokens * ((16.0 * model.hidden_size + 3.0 * model.intermediate_size) * layers + 2.0 * model.vocab_size) *
           4.0;
  };
  sao::algo::LearnerConfig learner;
  const auto plain = sao::train::estimate_learner_rank_memory(model, true, batch_tokens, learner);
  // weights + gradients + two moments, for policy and critic, + one pass over the whole batch.
  CHECK(plain.bytes == static_cast<int64_t>(2 * p + 2 * p + 4 * p + activations(65536, model.num_hidden_layers)));
  learner.ranks = 2;
  const auto two = sao::train::estimate_learner_rank_memory(model, true, batch_tokens, learner);
  CHECK(two.bytes == static_cast<int64_t>(8 * p + activations(32768, model.num_hidden_layers)));
  learner.shard_optimizer = true;
  const auto sharded = sao::train::estimate_learner_rank_memory(model, true, batch_tokens, learner);
  CHECK(two.bytes - sharded.bytes == static_cast<int64_t>(2 * p));  // half of the 4P of moments
  learner.micro_batch_tokens = 8192;
  const auto micro = sao::train::estimate_learner_rank_memory(model, true, batch_tokens, learner);
  CHECK(micro.bytes == static_cast<int64_t>(6 * p + activations(8192, model.num_hidden_layers)));
  learner.activation_checkpointing = true;
  const auto checkpointed = sao::train::estimate_learner_rank_memory(model, true, batch_tokens, learner);
  CHECK(checkpointed.bytes == static_cast<int64_t>(6 * p + 8192.0 * model.hidden_size * model.num_hidden_layers * 4.0 +
                                                   activations(8192, 1)));
  CHECK(checkpointed.breakdown.find("activations (checkpointed)") != std::string::npos);
  // The advice: everything fits in plenty; in the plain 2-rank bytes, the first fit is 2 ranks with no switch.
  const auto roomy = sao::train::learner_memory_advice(model, true, batch_tokens, int64_t{1} << 40);
  CHECK(roomy.back() == "the first that fits: learner.ranks 1 with no switch");
  const auto tight = sao::train::learner_memory_advice(model, true, batch_tokens, two.bytes);
  CHECK(tight.back() == "the first that fits: learner.ranks 1, activation_checkpointing");
  const auto none = sao::train::learner_memory_advice(model, true, batch_tokens, 1024);
  CHECK(none.back().find("none of these fits") == 0);
}
