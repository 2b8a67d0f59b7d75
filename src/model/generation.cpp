// Batched KV-cache decoding; see generation.hpp for the contract.
#include "model/generation.hpp"

#include "base/error.hpp"
#include "model/decode_engine.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <limits>

namespace sao::model {

void SamplingConfig::validate(const std::string& source) const {
  if (temperature < 0) throw Error(source + ".temperature: must be >= 0 (0 = greedy)");
  if (top_k < 0) throw Error(source + ".top_k: must be >= 0 (0 disables)");
  if (!(top_p > 0 && top_p <= 1)) throw Error(source + ".top_p: must be in (0, 1]");
  if (max_new_tokens < 1) throw Error(source + ".max_new_tokens: must be >= 1");
}

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kRunning:
      return "running";
    case FinishReason::kStopToken:
      return "stop_token";
    case FinishReason::kMaxNewTokens:
      return "max_new_tokens";
    case FinishReason::kContextFull:
      return "context_full";
  }
  return "unknown";
}

torch::Tensor sampling_log_probs(const torch::Tensor& logits, const SamplingConfig& config) {
  auto scaled = logits.to(torch::kFloat32);
  if (config.temperature == 0.0) {
    // Greedy is a point mass: log-prob 0 at the argmax, -inf elsewhere.
    auto result = torch::full_like(scaled, -std::numeric_limits<float>::infinity());
    return result.scatter_(1, scaled.argmax(1, /*keepdim=*/true), 0.0);
  }
  if (config.temperature != 1.0) scaled = scaled / config.temperature;
  const float negative_infinity = -std::numeric_limits<float>::infinity();
  if (config.top_k > 0 && config.top_k < scaled.size(1)) {
    auto kth = std::get<0>(scaled.topk(config.top_k, 1)).narrow(1, config.top_k - 1, 1);  // [R, 1]
    scaled = scaled.masked_fill(scaled < kth, negative_infinity);
  }
  if (config.top_p < 1.0) {
    auto sorted = scaled.sort(1, /*descending=*/true);
    auto sorted_probs = torch::softmax(std::get<0>(sorted), 1);
    // Keep the smallest prefix whose mass reaches top_p (the first token always stays).
    auto mass_before = sorted_probs.cumsum(1) - sorted_probs;
    auto remove_sorted = mass_before >= config.top_p;
    auto remove = torch::zeros_like(remove_sorted).scatter(1, std::get<1>(sorted), remove_sorted);
    scaled = scaled.masked_fill(remove, negative_infinity);
  }
  return torch::log_softmax(scaled, 1);
}

torch::Tensor sample_on_device(const torch::Tensor& log_probs, const torch::Tensor& uniforms) {
  // Inverse CDF in float64: with a 150k-token vocabulary a float32 running
  // sum loses the tail's resolution. A token of probability 0 has a CDF step
  // of 0, so it can only be hit by the clamp at the very end, which the
  // where() below turns into the most likely token instead.
  auto cdf = log_probs.to(torch::kFloat64).exp().cumsum(1);  // [R, V]
  auto targets = uniforms.to(torch::kFloat64) * cdf.narrow(1, cdf.size(1) - 1, 1);
  auto chosen = torch::searchsorted(cdf, targets, /*out_int32=*/false, /*right=*/true).clamp_max(cdf.size(1) - 1);
  auto impossible = torch::isinf(log_probs.gather(1, chosen));
  return torch::where(impossible, log_probs.argmax(1, /*keepdim=*/true), chosen);
}

std::vector<GeneratedSequence> generate(CausalLM& policy, const std::vector<std::vector<int64_t>>& prompts,
                                        const SamplingConfig& config, uint64_t seed, int64_t weight_version) {
  config.validate("sampling");
  const int64_t max_positions = policy->config().max_position_embeddings;
  EngineLimits limits;
  int64_t blocks = 0, prompt_tokens = 0;
  for (const auto& prompt : prompts) {
    const auto length = static_cast<int64_t>(prompt.size());
    blocks += KVBlockPool::blocks_for(std::min(length + config.max_new_tokens, max_positions), limits.block_size);
    prompt_tokens += length;
  }
  // Every prompt fits at once and is prefilled in the first step.
  limits.kv_cache_tokens = std::max<int64_t>(blocks, 1) * limits.block_size;
  limits.prefill_chunk_tokens = std::max<int64_t>(prompt_tokens, 1);
  DecodeEngine engine(policy->config(), config, limits, seed);
  std::vector<SequenceId> ids;
  ids.reserve(prompts.size());
  for (size_t row = 0; row < prompts.size(); ++row) {
    if (prompts[row].empty()) throw Error("prompt " + std::to_string(row) + " is empty: it needs at least one token");
    // A prompt that fills the context has no position left for a reply.
    if (static_cast<int64_t>(prompts[row].size()) >= max_positions) {
      ids.push_back(-1);
      continue;
    }
    ids.push_back(engine.add(prompts[row]));
  }
  while (engine.has_work()) engine.step(policy, weight_version);
  std::vector<GeneratedSequence> result;
  result.reserve(ids.size());
  for (const auto id : ids) {
    if (id >= 0) {
      result.push_back(engine.sequence(id));
      continue;
    }
    result.emplace_back();
    result.back().finish = FinishReason::kContextFull;
  }
  return result;
}

}  // namespace sao::model
