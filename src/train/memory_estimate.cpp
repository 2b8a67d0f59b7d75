// Memory estimates; see memory_estimate.hpp.
#include "train/memory_estimate.hpp"

#include "base/error.hpp"

#include <cstdio>
#include <fstream>
#include <sstream>

namespace sao::train {

namespace {

constexpr double kFloatBytes = 4.0;

std::string gib(double bytes) {
  char text[32];
  if (bytes >= 1024.0 * 1024 * 1024) {
    std::snprintf(text, sizeof(text), "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
  } else {
    std::snprintf(text, sizeof(text), "%.1f MiB", bytes / (1024.0 * 1024));
  }
  return text;
}

struct Tally {
  double bytes = 0;
  std::string breakdown;
  void add(const char* what, double amount) {
    bytes += amount;
    breakdown += (breakdown.empty() ? "" : ", ") + std::string(what) + " " + gib(amount);
  }
  MemoryEstimate done() const {
    MemoryEstimate estimate;
    estimate.bytes = bytes > 9e18 ? static_cast<int64_t>(9e18) : static_cast<int64_t>(bytes);
    estimate.breakdown = breakdown;
    return estimate;
  }
};

// Activations kept for the backward pass of one batch: per token and layer
// about 16 hidden-sized vectors (attention and MLP inputs and outputs, norms)
// plus the MLP's intermediate ones, and the logits over the vocabulary.
double activation_bytes(const model::ModelConfig& model, double tokens) {
  const double per_layer =
      16.0 * static_cast<double>(model.hidden_size) + 3.0 * static_cast<double>(model.intermediate_size);
  return tokens *
         (per_layer * static_cast<double>(model.num_hidden_layers) + 2.0 * static_cast<double>(model.vocab_size)) *
         kFloatBytes;
}

}  // namespace

MemoryEstimate estimate_sft_memory(const config::RunConfig& config) {
  const double parameters = static_cast<double>(config.model.parameter_count()) * kFloatBytes;
  Tally tally;
  tally.add("policy", parameters);
  tally.add("gradients and optimiser", 3 * parameters);
  tally.add("activations",
            activation_bytes(config.model, static_cast<double>(config.sft.batch_size) *
                                               static_cast<double>(config.model.max_position_embeddings)));
  return tally.done();
}

MemoryEstimate estimate_train_memory(const config::RunConfig& config) {
  const auto& model = config.model;
  const double parameters = static_cast<double>(model.parameter_count()) * kFloatBytes;
  const double models = config.learner.uses_critic() ? 2.0 : 1.0;
  Tally tally;
  tally.add("learner models", models * parameters);
  tally.add("gradients and optimisers", models * 3 * parameters);
  const double actors = static_cast<double>(config.rollout.num_actors);
  // The most a rollout's paged KV pool can hold (rollout.kv_cache_tokens);
  // its storage grows with the blocks in use up to that.
  const double kv_cache =
      static_cast<double>(config.rollout.kv_pool_tokens(model.max_position_embeddings)) * 2.0 *
      static_cast<double>(model.num_hidden_layers) * static_cast<double>(model.num_key_value_heads) *
      static_cast<double>(model.head_dim()) * kFloatBytes;
  tally.add("rollout replicas", actors * parameters);
  tally.add("KV pools", actors * kv_cache);
  tally.add("learner activations",
            models * activation_bytes(model, static_cast<double>(config.replay.max_batch) *
                                                 static_cast<double>(model.max_position_embeddings)));
  return tally.done();
}

void require_memory(const MemoryEstimate& estimate, int64_t available_bytes, const std::string& what) {
  if (available_bytes < 0 || estimate.bytes <= available_bytes) return;
  throw Error(what + ": the run needs about " + gib(static_cast<double>(estimate.bytes)) + " (" + estimate.breakdown +
              "), but " + gib(static_cast<double>(available_bytes)) +
              " of memory is available; make the model, the batches or model.max_position_embeddings smaller");
}

int64_t available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream fields(line.substr(13));
    int64_t kib = -1;
    fields >> kib;
    return kib < 0 ? -1 : kib * 1024;
  }
  return -1;
}

}  // namespace sao::train
