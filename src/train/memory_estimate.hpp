// How much memory a run will need, estimated from its config before anything
// is allocated, so that a config too large for the machine stops at start
// with the estimate rather than being killed (or swapping for hours) once
// the model, optimiser and caches are half built. fp32 throughout, as the
// CPU path computes; activations are an upper-bound sketch, not a profile.
#pragma once

#include "config/run_config.hpp"

#include <cstdint>
#include <string>

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

// Throws sao::Error when `estimate` exceeds `available_bytes` (>= 0), e.g.
// "fuzz.json: the run needs about 41.2 GiB (policy ..., ...), but 22.9 GiB
// of memory is available; make the model or batches smaller".
void require_memory(const MemoryEstimate& estimate, int64_t available_bytes, const std::string& what);

// MemAvailable from /proc/meminfo in bytes; -1 when it cannot be read.
int64_t available_memory_bytes();

}  // namespace sao::train
