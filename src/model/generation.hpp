// Batched sampling with a KV cache. Every generated token comes with its
// log-probability under the distribution it was actually drawn from and the
// weight version that produced it: the learner's importance ratios are only
// correct if these are exact.
//
// A DecodeSession is driven one step at a time and is handed the policy on
// every step, so the weights may change between two decode steps of the same
// batch (in-flight weight updates) without restarting it. The KV cache
// computed with older weights is kept, as SAO's rollout workers do.
#pragma once

#include "model/transformer.hpp"

#include <ATen/core/Generator.h>

#include <cstdint>
#include <string>
#include <vector>

namespace sao::model {

struct SamplingConfig {
  double temperature = 1.0;  // 0 means greedy
  int64_t top_k = 0;         // 0 disables
  double top_p = 1.0;        // 1 disables
  int64_t max_new_tokens = 16;
  std::vector<int64_t> stop_tokens;

  // True when the recorded log-probs are the policy's own distribution.
  bool samples_policy_distribution() const { return temperature == 1.0 && top_k == 0 && top_p >= 1.0; }
  // Throws sao::Error naming `source` and the key.
  void validate(const std::string& source) const;
};

enum class FinishReason { kRunning, kStopToken, kMaxNewTokens, kContextFull };
const char* finish_reason_name(FinishReason reason);

struct GeneratedSequence {
  std::vector<int64_t> tokens;    // every generated id, including a final stop token
  std::vector<float> logprobs;    // log-prob of each token under the sampling distribution
  std::vector<int64_t> versions;  // weight version that produced each token
  FinishReason finish = FinishReason::kRunning;
  size_t turn_start = 0;  // index in `tokens` where the current turn began
};

class DecodeSession {
 public:
  DecodeSession(std::vector<std::vector<int64_t>> prompts, SamplingConfig config, uint64_t seed);

  // One decode step for every running row (the first call also prefills the
  // prompts). Returns true while some row is still running.
  bool step(CausalLM& policy, int64_t weight_version);
  // Steps until every row has finished.
  void run(CausalLM& policy, int64_t weight_version);

  bool done() const;
  size_t rows() const { return sequences_.size(); }
  const GeneratedSequence& sequence(size_t row) const { return sequences_.at(row); }
  // Multi-turn: appends environment tokens to a finished row and lets it
  // generate again with a fresh budget of `max_new_tokens`.
  void continue_row(size_t row, const std::vector<int64_t>& observation_tokens, int64_t max_new_tokens);

 private:
  void sample_rows(const torch::Tensor& last_logits, const std::vector<size_t>& rows, int64_t weight_version,
                   int64_t max_positions);

  SamplingConfig config_;
  at::Generator generator_;
  KVCache cache_;
  bool cache_ready_ = false;
  std::vector<std::vector<int64_t>> pending_;  // tokens not yet in the cache, per row
  std::vector<GeneratedSequence> sequences_;
  std::vector<int64_t> budget_;  // new tokens this row may still generate in its turn
};

// Convenience: decode all prompts to completion with one set of weights.
std::vector<GeneratedSequence> generate(CausalLM& policy, const std::vector<std::vector<int64_t>>& prompts,
                                        const SamplingConfig& config, uint64_t seed, int64_t weight_version = 0);

// One token per row of log_probs [R, V] by inverse transform sampling,
// given uniforms [R, 1] in [0, 1) on the same device: the GPU's sampler, so
// that the random numbers still come from the session's seeded CPU
// generator and only R numbers cross to the device. Returns ids [R, 1].
torch::Tensor sample_on_device(const torch::Tensor& log_probs, const torch::Tensor& uniforms);

// Log-probs [R, V] of the sampling distribution for raw logits [R, V]
// (temperature, top-k and top-p applied; excluded tokens get -inf).
torch::Tensor sampling_log_probs(const torch::Tensor& logits, const SamplingConfig& config);

}  // namespace sao::model
