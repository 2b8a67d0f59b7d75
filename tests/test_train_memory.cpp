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
