// Policy and value losses and the critic-free baselines. Why these live
// apart from the Learner: each is a pure function of tensors, so it can be
// checked against hand-computed numbers and against a plain-loop reference,
// which is where sign and masking mistakes in RL code are caught.
//
// Common conventions: every [B, T] tensor is indexed by token position (see
// trajectory.hpp); `action_mask` [B, T] bool selects the action tokens; all
// means are over ALL action tokens of the batch (N = action_mask.sum()),
// padding, prompt and observation tokens excluded. Entries off the mask may
// hold anything finite or not: they never reach the loss or its gradient.
//
// `batch_tokens`: when a call sees only part of the batch (one rank's share,
// one micro-batch), N is the whole batch's action-token count, passed in, so
// that the parts' losses (and gradients) add up to the whole batch's. 0 (the
// default) means this call's own count.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <deque>
#include <vector>

namespace sao::algo {

struct PolicyLossResult {
  torch::Tensor loss;  // scalar, differentiable w.r.t. `logprobs`
  // Token fractions over N action tokens.
  //   DIS: below = ratio <= 1 - eps_low, above = ratio >= 1 + eps_high (rejected).
  //   PPO: below = clipping active with A < 0 (ratio < 1 - eps_low),
  //        above = clipping active with A > 0 (ratio > 1 + eps_high).
  double below_frac = 0.0;
  double above_frac = 0.0;
  double dual_clip_frac = 0.0;  // PPO only: tokens bounded by the dual clip
  double ratio_mean = 0.0;      // importance ratio over action tokens
  double ratio_max = 0.0;
  int64_t tokens = 0;  // action tokens this call saw (N unless batch_tokens says otherwise)
  // The same as counts and a sum over this call's tokens, for adding parts up.
  int64_t below_tokens = 0;
  int64_t above_tokens = 0;
  int64_t dual_clip_tokens = 0;
  double ratio_sum = 0.0;
};

struct DisOptions {
  double eps_low = 0.3;  // trusted iff 1 - eps_low < r < 1 + eps_high (strict)
  double eps_high = 5.0;
  // true (default): loss = -sum w_t A_t logp_t / N with w_t = r_t a constant.
  // false: the surrogate loss = -sum_trusted r_t A_t / N with r_t live. Both
  // have the gradient -r A grad(logp) / N inside the band and 0 outside; they
  // differ only in the loss value (the surrogate's is the usual PPO-style
  // objective, whose value near r = 1 reads as "expected advantage").
  bool detach_weight = true;
};

// DIS's trust band applied to importance ratios `ratio` (any shape, detached):
// the tokens it rejects on the low side (r <= 1 - eps_low) and on the high
// side (r >= 1 + eps_high). The one definition of the band: dis_loss rejects
// exactly these, and the learner's log-prob agreement check counts them.
struct DisBandFlags {
  torch::Tensor below;  // bool, ratio's shape
  torch::Tensor above;
};
DisBandFlags dis_outside_band(const torch::Tensor& ratio, const DisOptions& options);

// Direct double-sided importance sampling (SAO.md step 5):
//   r_t = exp(logp_t - logp_behaviour_t); w_t = r_t if trusted else 0;
//   loss = -sum_t w_t A_t logp_t / N  (rejected tokens still count in N).
// logprobs           [B, T] log-prob of each token under the current policy (requires grad)
// behaviour_logprobs [B, T] log-prob recorded at sampling time
// advantages         [B, T] A_t (detached by the caller or here)
// action_mask        [B, T] bool
// Throws sao::Error if there is no action token or eps are negative.
PolicyLossResult dis_loss(const torch::Tensor& logprobs, const torch::Tensor& behaviour_logprobs,
                          const torch::Tensor& advantages, const torch::Tensor& action_mask,
                          const DisOptions& options = {}, int64_t batch_tokens = 0);

struct PpoClipOptions {
  double eps_low = 0.2;  // clip range [1 - eps_low, 1 + eps_high]; eps_high > eps_low = clip-higher
  double eps_high = 0.2;
  double dual_clip = 0.0;  // c > 1 bounds the loss of A < 0 tokens at -c*A; 0 disables
};

// PPO clipped surrogate, one-sided by the sign of A:
//   obj_t = min(r_t A_t, clip(r_t, 1-eps_low, 1+eps_high) A_t);
//   with dual clip and A_t < 0: obj_t = max(obj_t, c A_t);
//   loss = -sum_t obj_t / N.
// The ratio is against the behaviour log-probs (no separate old-policy pass).
// Shapes as for dis_loss.
PolicyLossResult ppo_clip_loss(const torch::Tensor& logprobs, const torch::Tensor& behaviour_logprobs,
                               const torch::Tensor& advantages, const torch::Tensor& action_mask,
                               const PpoClipOptions& options = {}, int64_t batch_tokens = 0);

// Masked MSE: mean over action tokens of (V_t - R_t)^2.
// values [B, T] (requires grad), returns [B, T] fixed targets, action_mask [B, T].
// With clip > 0 and old_values [B, T] defined (PPO-style value clipping):
//   V_clip = old + clamp(V - old, -clip, clip); loss = mean(max((V-R)^2, (V_clip-R)^2)).
torch::Tensor value_loss(const torch::Tensor& values, const torch::Tensor& returns, const torch::Tensor& action_mask,
                         const torch::Tensor& old_values = {}, double clip = 0.0, int64_t batch_tokens = 0);

// Mean of x [B, T] over mask [B, T] (float scalar tensor, keeps gradient).
torch::Tensor masked_mean(const torch::Tensor& x, const torch::Tensor& mask, int64_t batch_tokens = 0);

// (A - mean) / (std + eps) over action tokens (population std); 0 elsewhere.
// advantages [B, T], action_mask [B, T]. Returns [B, T].
torch::Tensor normalize_advantages(const torch::Tensor& advantages, const torch::Tensor& action_mask,
                                   double eps = 1e-8);
// The same with the mean and std given (those of the whole batch when
// `advantages` is one rank's share of it).
torch::Tensor normalize_advantages(const torch::Tensor& advantages, const torch::Tensor& action_mask, double mean,
                                   double std, double eps = 1e-8);

// 1 - Var(R - V) / Var(R) over action tokens; NaN when Var(R) == 0.
// values, returns, action_mask: [B, T].
double explained_variance(const torch::Tensor& values, const torch::Tensor& returns, const torch::Tensor& action_mask);

// Mean entropy over action tokens. entropies [B, T].
double mean_over_actions(const torch::Tensor& x, const torch::Tensor& action_mask);

// GRPO group advantages, one per trajectory:
//   scale_by_std: (r - mean_g) / (std_g + eps)   (std with Bessel's correction,
//                 as TRL/verl; a group of one has std 0)
//   otherwise (Dr.GRPO): r - mean_g.
// A group whose rewards are all equal gets exactly 0. rewards and group_ids
// have one entry per trajectory.
std::vector<double> grpo_advantages(const std::vector<double>& rewards, const std::vector<int64_t>& group_ids,
                                    bool scale_by_std, double eps = 1e-6);

// Puts per-trajectory values [B] on every action token: [B, T] (0 off actions),
// in `dtype`.
torch::Tensor broadcast_to_actions(const std::vector<double>& per_trajectory, const torch::Tensor& action_mask,
                                   torch::ScalarType dtype = torch::kFloat32);

// Baseline = mean of the last `window` rewards seen (SAO ablation: 128).
class RunningMeanBaseline {
 public:
  explicit RunningMeanBaseline(size_t window = 128);
  double mean() const;  // 0 when nothing was pushed yet
  void push(double reward);
  size_t window() const { return window_; }
  const std::deque<double>& values() const { return values_; }
  // Replaces the contents (checkpoint restore); throws if longer than the window.
  void restore(const std::vector<double>& values);

 private:
  size_t window_;
  std::deque<double> values_;
};

}  // namespace sao::algo
