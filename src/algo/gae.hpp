// Skip-observation GAE (SAO.md, "Skip-observation GAE"). Why skip
// observations: tokens written by the environment are not decisions of the
// policy, so the Bellman chain links each action token directly to the next
// ACTION token of the same trajectory, however many observation tokens lie in
// between; the value after an observation block is the next action token's.
//
// For consecutive action positions p and q:
//   delta_p = r_p + gamma * V_q - V_p,   A_p = delta_p + gamma * lambda * A_q.
// After the last action the next value is 0 if terminated, the bootstrap
// value if truncated. Returns R_p = A_p + V_p are the critic targets.
//
// Computed on CPU in float64 with plain loops (exact, and cheap next to the
// forward passes); results come back in the dtype of `values`.
#pragma once

#include <torch/types.h>

namespace sao::algo {

struct GaeResult {
  torch::Tensor advantages;  // [B, T], 0 at non-action and padding positions
  torch::Tensor returns;     // [B, T], A + V at action positions, 0 elsewhere
};

// rewards     [B, T] per-token rewards (must be 0 off actions; throws sao::Error otherwise)
// values      [B, T] V_t at action positions (see trajectory.hpp: the critic's
//                    output at t-1); other entries are ignored
// action_mask [B, T] bool
// terminated  [B]    bool; false = truncated (bootstrap)
// bootstrap   [B]    value of the final state, used only where !terminated
// lambdas     [B]    per-trajectory lambda in [0, 1]
// Inputs are detached; no gradient flows through GAE.
GaeResult skip_observation_gae(const torch::Tensor& rewards, const torch::Tensor& values,
                               const torch::Tensor& action_mask, const torch::Tensor& terminated,
                               const torch::Tensor& bootstrap, double gamma, const torch::Tensor& lambdas);

// [B] float64: clamp(1 - 1/(alpha * L_b), 0, 1), L_b = action tokens of row b
// (from action_mask [B, T]). A row without actions gets 0. alpha > 0.
torch::Tensor length_adaptive_lambda(const torch::Tensor& action_mask, double alpha);

// [B] float64 filled with `lambda` (the fixed-lambda case).
torch::Tensor constant_lambda(int64_t batch_size, double lambda);

}  // namespace sao::algo
