// How much memory a run will need, estimated from its config before anything
// is allocated, so that a config too large for the machine stops at start
// with the estimate rather than being killed (or swapping for hours) once
// the model, optimiser and caches are half built. fp32 throughout, as the
// CPU path computes; activations are an upper-bound sketch, not a profile.
#pragma once

#include "config/run_config.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace sao::train {

struct MemoryEstimate {
  int64_t bytes = 0;
  std::string breakdown;  // "policy 3.0 MiB, optimiser 6.1 MiB, ..." for the message
};

// `sao sft`: the policy, its gradients and AdamW's two moments, and one
// batch of activations and logits.
MemoryEstimate estimate_sft_memory(const config::RunConfig& config);

// `sao train` (or a learner node): the learner's models with gradients and
// optimisers, every local rollout replica with its KV cache, and one learner
// batch of activations and logits.
MemoryEstimate estimate_train_memory(const config::RunConfig& config);

// One learner rank's memory with the learner's memory switches
// (learner.ranks, shard_optimizer, micro_batch_tokens,
// activation_checkpointing) for a step of `batch_tokens` padded tokens: the
// models' weights and gradients, the AdamW moments this rank holds (1/N of
// them under ZeRO-1), and the activations of the largest single pass over
// the rank's share (or one micro-batch); the critic's and the policy's passes
// do not overlap. Checkpointed, a pass keeps each layer's input plus one
// layer's activations and the logits.
MemoryEstimate estimate_learner_rank_memory(const model::ModelConfig& model, bool critic, int64_t batch_tokens,
                                            const algo::LearnerConfig& learner);

// `sao doctor`'s advice: for 1, 2, 4 and 8 ranks, the bytes a rank needs
// plain and with activation checkpointing, ZeRO-1 and micro-batches of
// 8,192 tokens added in turn, each marked with whether it fits in
// `device_bytes`, and the first combination that fits.
std::vector<std::string> learner_memory_advice(const model::ModelConfig& model, bool critic, int64_t batch_tokens,
                                               int64_t device_bytes);

// Throws sao::Error when `estimate` exceeds `available_bytes` (>= 0), e.g.
// "fuzz.json: the run needs about 41.2 GiB (policy ..., ...), but 22.9 GiB
// of memory is available; make the model or batches smaller".
void require_memory(const MemoryEstimate& estimate, int64_t available_bytes, const std::string& what);

// MemAvailable from /proc/meminfo in bytes; -1 when it cannot be read.
int64_t available_memory_bytes();

}  // namespace sao::train
