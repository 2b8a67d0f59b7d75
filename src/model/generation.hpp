// Sampling: what a generated token records and how it is drawn. Every
// generated token comes with its log-probability under the distribution it
// was actually drawn from and the weight version that produced it: the
// learner's importance ratios are only correct if these are exact. The
// decode engine (decode_engine.hpp) runs the sequences.
#pragma once

#include "model/transformer.hpp"

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

// Convenience: decode all prompts to completion with one set of weights
// through a DecodeEngine whose pool holds every prompt's whole turn.
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
