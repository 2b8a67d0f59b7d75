// AdamW's per-parameter state (step count and moments), reached by
// parameter. Why here: LibTorch keys the state by the parameter's
// TensorImpl (a string of its address in 1.13, the address itself in 2.x),
// and data-parallel ranks must read, copy and compare it: one place knows
// the key.
#pragma once

#include "algo/rank_group.hpp"

#include <torch/optim/adamw.h>

#include <memory>
#include <vector>

namespace sao::algo {

// The state of `param` in `optimizer`, or nullptr before its first step.
torch::optim::AdamWParamState* adamw_state(torch::optim::AdamW& optimizer, const torch::Tensor& param);

// Installs `state` as `param`'s (replacing any).
void put_adamw_state(torch::optim::AdamW& optimizer, const torch::Tensor& param,
                     std::unique_ptr<torch::optim::AdamWParamState> state);

// Every rank's optimizer state for `params` becomes rank `root`'s: step
// counts, moments, and which parameters have state at all.
void share_adamw_state(RankGroup& group, torch::optim::AdamW& optimizer, const std::vector<torch::Tensor>& params,
                       int root);

}  // namespace sao::algo
