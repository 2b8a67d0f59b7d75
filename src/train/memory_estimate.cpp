// Memory estimates; see memory_estimate.hpp.
#include "train/memory_estimate.hpp"

#include "base/error.hpp"

#include <algorithm>
#include <cmath>
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

// The learner's policy: its base at 4 bytes a parameter (2 when a LoRA base
// is kept in bf16, learner.lora_base_dtype), plus fp32 adapters.
double policy_weight_bytes(const model::ModelConfig& model, const algo::LearnerConfig& learner) {
  const double base_bytes = model.lora.enabled() && learner.lora_base_bf16() ? 2.0 : kFloatBytes;
  const double adapters =
      model.lora.enabled() ? static_cast<double>(model.trainable_parameter_count()) * kFloatBytes : 0.0;
  return static_cast<double>(model.parameter_count()) * base_bytes + adapters;
}

MemoryEstimate estimate_train_memory(const config::RunConfig& config) {
  const auto& model = config.model;
  const double parameters = static_cast<double>(model.parameter_count()) * kFloatBytes;
  const double models = config.learner.uses_critic() ? 2.0 : 1.0;
  Tally tally;
  // A LoRA policy keeps gradients and AdamW moments for its adapters only.
  const double trained = static_cast<double>(model.trainable_parameter_count()) * kFloatBytes;
  tally.add("learner models", policy_weight_bytes(model, config.learner) + (models - 1.0) * parameters);
  tally.add("gradients and optimisers", 3 * (trained + (models - 1.0) * parameters));
  const double actors = static_cast<double>(config.rollout.num_actors);
  // A bf16 replica (rollout.weights_dtype) holds its weights and its KV
  // pool at 2 bytes an element.
  const double replica_bytes = config.rollout.bf16_replica() ? 2.0 : kFloatBytes;
  // The most a rollout's paged KV pool can hold (rollout.kv_cache_tokens);
  // its storage grows with the blocks in use up to that.
  const double kv_cache = static_cast<double>(config.rollout.kv_pool_tokens(model.max_position_embeddings)) * 2.0 *
                          static_cast<double>(model.num_hidden_layers) *
                          static_cast<double>(model.num_key_value_heads) * static_cast<double>(model.head_dim()) *
                          replica_bytes;
  tally.add("rollout replicas", actors * static_cast<double>(model.parameter_count()) * replica_bytes);
  tally.add("KV pools", actors * kv_cache);
  tally.add("learner activations",
            models * activation_bytes(model, static_cast<double>(config.replay.max_batch) *
                                                 static_cast<double>(model.max_position_embeddings)));
  return tally.done();
}

MemoryEstimate estimate_learner_rank_memory(const model::ModelConfig& model, bool critic, int64_t batch_tokens,
                                            const algo::LearnerConfig& learner) {
  const double parameters = static_cast<double>(model.parameter_count()) * kFloatBytes;
  const double models = critic ? 2.0 : 1.0;
  const double ranks = static_cast<double>(std::max<int64_t>(learner.ranks, 1));
  double tokens = std::ceil(static_cast<double>(batch_tokens) / ranks);
  if (learner.micro_batch_tokens > 0) tokens = std::min(tokens, static_cast<double>(learner.micro_batch_tokens));
  Tally tally;
  const double trained = static_cast<double>(model.trainable_parameter_count()) * kFloatBytes;
  const double trained_total = trained + (models - 1.0) * parameters;  // a LoRA policy trains its adapters only
  tally.add("weights", policy_weight_bytes(model, learner) + (models - 1.0) * parameters);
  tally.add("gradients", trained_total);
  tally.add("AdamW moments", 2 * trained_total / (learner.shard_optimizer ? ranks : 1.0));
  if (learner.activation_checkpointing) {
    // Each layer's input, then one layer recomputed at a time, and the logits.
    auto one_layer = model;
    one_layer.num_hidden_layers = 1;
    const double inputs = tokens * static_cast<double>(model.hidden_size * model.num_hidden_layers) * kFloatBytes;
    tally.add("activations (checkpointed)", inputs + activation_bytes(one_layer, tokens));
  } else {
    tally.add("activations", activation_bytes(model, tokens));
  }
  return tally.done();
}

std::vector<std::string> learner_memory_advice(const model::ModelConfig& model, bool critic, int64_t batch_tokens,
                                               int64_t device_bytes) {
  std::vector<std::string> lines;
  char line[256];
  std::snprintf(line, sizeof(line), "%-5s %-66s %12s  fits in %s", "ranks", "learner switches", "per rank",
                gib(static_cast<double>(device_bytes)).c_str());
  lines.emplace_back(line);
  std::string first_fit;
  for (const int64_t ranks : {1, 2, 4, 8}) {
    algo::LearnerConfig learner;
    learner.ranks = ranks;
    // Each row adds one switch to the one above it.
    for (int level = 0; level < 4; ++level) {
      learner.activation_checkpointing = level >= 1;
      learner.shard_optimizer = level >= 2 && ranks > 1;
      learner.micro_batch_tokens = level >= 3 ? 8192 : 0;
      if (level == 2 && ranks == 1) continue;  // ZeRO-1 needs ranks to shard over
      std::string switches = level == 0 ? "none" : "activation_checkpointing";
      if (learner.shard_optimizer) switches += " +shard_optimizer";
      if (learner.micro_batch_tokens > 0) switches += " +micro_batch_tokens 8192";
      const auto estimate = estimate_learner_rank_memory(model, critic, batch_tokens, learner);
      const bool fits = estimate.bytes <= device_bytes;
      std::snprintf(line, sizeof(line), "%-5lld %-66s %12s  %s", static_cast<long long>(ranks),
                    level == 0 ? "none" : switches.c_str(), gib(static_cast<double>(estimate.bytes)).c_str(),
                    fits ? "yes" : "no");
      lines.emplace_back(line);
      if (fits && first_fit.empty()) {
        first_fit = "learner.ranks " + std::to_string(ranks) + (level == 0 ? " with no switch" : ", " + switches);
      }
    }
  }
  lines.push_back(first_fit.empty() ? "none of these fits: a smaller model, a smaller batch, or more memory a rank"
                                    : "the first that fits: " + first_fit);
  return lines;
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
