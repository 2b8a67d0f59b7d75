// One learner step on a batch of finished trajectories (SAO.md, "One learner
// step"), for SAO and the baselines it is compared with. Why a synchronous,
// actor-free class: the maths must be testable and bit-reproducible on its
// own; the runtime's learner actor only feeds it batches and publishes the
// policy after each step.
//
// SAO step (baseline = critic):
//   1. critic snapshot V (no grad) -> fixed targets R = GAE(lambda_critic) + V
//   2. K critic AdamW steps on the same R (attention frozen by default)
//   3. critic forward again -> actor advantages with per-trajectory lambda
//   4. policy loss (DIS by default) -> one AdamW step; policy_version += 1
//   During the first W steps (warm-up) only 1-2 run; the policy is untouched.
// GRPO: group advantages on every action token + PPO clip, no critic.
// Running-mean ablation: V = mean of the last N returns at every action
// token (before this batch's returns are added), lambda = 1.
//
// A non-finite reward or behaviour log-prob, loss, or gradient norm skips the
// rest of the step: the offending optimiser step is not taken, the skip is
// counted, and policy_version stays (the policy did not change). Critic
// steps of the same learner step that were already taken remain.
//
// policy_version counts actor optimiser steps actually taken (warm-up and
// skipped steps leave it unchanged). Staleness of an action token = the
// learner's policy_version at the step minus the token's version.
#pragma once

#include "algo/gae.hpp"
#include "algo/learner_config.hpp"
#include "algo/length_buckets.hpp"
#include "algo/losses.hpp"
#include "algo/rank_group.hpp"
#include "algo/sharded_adamw.hpp"
#include "algo/step_plan.hpp"
#include "algo/trajectory.hpp"
#include "model/transformer.hpp"

#include <torch/optim/adamw.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace sao::algo {

// Named numbers of one step. Keys (present where they apply):
//   reward_mean, accuracy (only if some trajectory defines it), policy_loss,
//   value_loss (critic loss before the first update, on the fixed targets),
//   value_loss_final (after the K-th update's forward), explained_variance
//   (snapshot V vs targets R; absent when Var(R) = 0), entropy,
//   dis_reject_low_frac / dis_reject_high_frac (DIS) or ppo_clip_low_frac /
//   ppo_clip_high_frac / ppo_dual_clip_frac (PPO), ratio_mean, ratio_max,
//   staleness_mean, staleness_max, staleness_hist_0 / _1 / _2_3 / _4_7 /
//   _8_plus (action-token counts), grad_norm (actor, before
//   clipping), value_grad_norm (last critic update), tokens (real tokens),
//   action_tokens, trajectories, length_buckets (passes per model per
//   forward), step_seconds, learner_tokens_per_s,
//   advantage_mean, advantage_std, baseline_mean (running mean only),
//   critic_only (1 during warm-up), critic_updates (taken this step),
//   policy_updated, step_skipped, skipped_nonfinite (cumulative count),
//   policy_version (after the step), learner_step (after the step),
//   micro_batches (pieces per rank, learner.micro_batch_tokens), with more
//   than one rank: allreduce_s, allreduce_share (of the step's seconds) and
//   per rank r: rank<r>_tokens, rank<r>_compute_s, rank<r>_allreduce_s;
//   lag0_tokens (action tokens sampled at the learner's current version,
//   staleness 0), and over those tokens, absent when there is none:
//   logprob_gap_lag0_max (largest |behaviour - learner log-prob|, the
//   learner's from this step's own forward pass) and
//   logprob_outside_dis_lag0_frac (share whose ratio lies outside DIS's trust
//   band, dis_outside_band, whatever the policy loss). Same weights, so both
//   should be ~0; they measure numerics only when the rollouts sample the
//   policy's own distribution (temperature 1, no top-k/top-p: the default).
//   The learner is not told how rollouts sample; at another temperature
//   these measure that difference instead.
using Metrics = std::map<std::string, double>;

struct StepResult {
  Metrics metrics;
  bool policy_updated = false;
  bool skipped_nonfinite = false;
  int64_t critic_updates = 0;  // critic optimiser steps taken
  // Rows of this rank's share of the batch (StepPlan::share; the whole
  // batch on one rank):
  torch::Tensor critic_targets;  // [B, T] fixed R used by all K updates (undefined without critic)
  torch::Tensor advantages;      // [B, T] actor advantages (0 off actions)
};

// Per-token policy quantities in the token-position convention
// (trajectory.hpp): entry t is about token t, from the logits at t-1;
// entry 0 is 0.
struct PolicyOutputs {
  torch::Tensor logprobs;  // [B, T] log pi(token_t | tokens_<t), differentiable
  torch::Tensor entropy;   // [B, T] entropy of the distribution token t was drawn from (detached)
};
PolicyOutputs policy_outputs(model::CausalLM& policy, const torch::Tensor& input_ids);

struct CriticOutputs {
  torch::Tensor values;     // [B, T] V_t = critic output at t-1 (entry 0 is 0)
  torch::Tensor bootstrap;  // [B] critic output at each row's last real token
};
// input_ids [B, T]; lengths [B] real tokens per row.
CriticOutputs critic_outputs(model::ValueModel& critic, const torch::Tensor& input_ids, const torch::Tensor& lengths);

// The same outputs, computed bucket by bucket at each bucket's own width
// (length_buckets.hpp) and put back in batch order at width T; entries past
// a row's bucket width are 0. With one bucket of width T these are exactly
// the functions above.
PolicyOutputs policy_outputs(model::CausalLM& policy, const torch::Tensor& input_ids,
                             const std::vector<LengthBucket>& buckets);
CriticOutputs critic_outputs(model::ValueModel& critic, const torch::Tensor& input_ids, const torch::Tensor& lengths,
                             const std::vector<LengthBucket>& buckets);

// Freezes the critic's attention; throws sao::Error if it has none.
int64_t freeze_attention(torch::nn::Module& critic);

// learner_state.json of a learner checkpoint directory (Learner::save),
// parsed and checked. Throws sao::Error naming the file and key.
struct LearnerState {
  int64_t step = 0;
  int64_t policy_version = 0;
  int64_t skipped_nonfinite = 0;
  std::vector<double> running_mean;
};
LearnerState read_learner_state(const std::string& dir);

// Data-parallel ranks (rank_group.hpp): every rank holds the whole policy
// and critic and runs step() on the same trajectories (rank 0 ships them,
// learner_ranks.hpp); each computes forward and backward on its share of
// the rows (step_plan.hpp), the gradients are summed over the ranks, and
// every rank takes the same optimiser step, so N ranks compute what one
// rank computes on the whole batch (to float rounding). Every number the
// step reports is the whole batch's, on every rank.
class Learner {
 public:
  // `critic` is required iff config.uses_critic() (pass ValueModel{nullptr}
  // otherwise); it must not share weights with the policy. The models are
  // held by reference (module holders): the caller may publish `policy()`.
  // `ranks`: the group this learner is one rank of (nullptr: alone).
  Learner(LearnerConfig config, model::CausalLM policy, model::ValueModel critic = model::ValueModel{nullptr},
          std::shared_ptr<RankGroup> ranks = nullptr);

  // One complete step. Throws sao::Error for malformed trajectories (named
  // by index), GRPO groups of the wrong size, or tokens from a future
  // policy version. An empty batch does nothing. Staleness admission is
  // replay's (replay/replay_buffer.hpp); this only measures staleness.
  StepResult step(const std::vector<Trajectory>& trajectories);

  // Checkpoint: policy.safetensors, critic.safetensors, actor_optimizer.pt,
  // critic_optimizer.pt, learner_state.json (step, policy version, skip
  // count, running-mean window). load() expects a learner built with the
  // same config and model shapes; it continues bit-identically. It checks
  // that every file exists and reads the state file before touching any
  // weight; if a tensor file then fails to validate (sao::Error naming file
  // and tensor), files loaded before it stay loaded: discard the learner.
  // With ZeRO-1 over several ranks save() is a collective: every rank
  // calls it (RankLeader::save does), the shards gather on rank 0, and only
  // rank 0 writes (the other ranks' `dir` is ignored). load() is rank 0's
  // alone; share_state() then hands the state to the other ranks.
  void save(const std::string& dir);
  void load(const std::string& dir);

  // Ranks: every rank's weights, optimiser state, step counters and
  // running-mean window become rank `root`'s (after rank 0 built or loaded
  // its learner). A collective: every rank calls it.
  void share_state(int root = 0);
  // The bit fingerprint (rank_group.hpp) of the policy's and critic's
  // parameters and, unless the optimizer is sharded (each rank then holds
  // other moments), their moments.
  int64_t fingerprint();
  // Throws RankFailure naming the ranks whose fingerprints differ from rank
  // 0's. A collective: every rank calls it.
  void check_ranks_agree();
  RankGroup& ranks() { return *ranks_; }
  // The AdamW this rank steps for each model (its share under ZeRO-1;
  // per-parameter state: adamw_state.hpp). The critic's is null without a critic.
  torch::optim::AdamW& actor_optimizer() { return actor_optimizer_->local(); }
  torch::optim::AdamW* critic_optimizer() { return critic_optimizer_ ? &critic_optimizer_->local() : nullptr; }
  // Bytes of AdamW moments this rank holds, both models.
  int64_t optimizer_state_bytes();

  // Live knobs (console `set`): take effect at the next step; the optimiser
  // state (moments) is kept. Learning rates must be > 0; throws sao::Error.
  void set_actor_lr(double lr);
  void set_critic_lr(double lr);  // sao::Error if this learner has no critic

  const LearnerConfig& config() const { return config_; }
  model::CausalLM& policy() { return policy_; }
  model::ValueModel& critic() { return critic_; }
  int64_t policy_version() const { return policy_version_; }
  int64_t steps() const { return steps_; }
  int64_t skipped_nonfinite() const { return skipped_nonfinite_; }
  const RunningMeanBaseline& running_baseline() const { return running_baseline_; }

 private:
  // Validates every trajectory and checks the one staleness invariant the
  // learner owns: no action token from a policy newer than its own.
  void check_admissible(const std::vector<Trajectory>& trajectories) const;
  void train(const std::vector<Trajectory>& kept, StepResult& result);
  torch::Tensor critic_stage(const TrajectoryBatch& batch, StepResult& result);
  // The critic's outputs on this rank's share, piece by piece, without a
  // graph unless the plan has one piece.
  CriticOutputs share_critic_outputs(const TrajectoryBatch& share);
  // One critic optimiser step; `current` is this step's forward pass when
  // the caller already ran it (the first update reuses the snapshot's).
  bool critic_update(const TrajectoryBatch& batch, const torch::Tensor& targets, const torch::Tensor& old_values,
                     Metrics& metrics, const CriticOutputs* current);
  torch::Tensor baseline_advantages(const TrajectoryBatch& batch, Metrics& metrics) const;
  bool actor_stage(const TrajectoryBatch& batch, const torch::Tensor& advantages, bool train, Metrics& metrics);
  void record_skip(StepResult& result);

  LearnerConfig config_;
  model::CausalLM policy_;
  model::ValueModel critic_;
  std::shared_ptr<RankGroup> ranks_;
  torch::Device device_;
  std::vector<torch::Tensor> actor_params_, critic_params_;
  std::unique_ptr<ShardedAdamW> actor_optimizer_, critic_optimizer_;
  RunningMeanBaseline running_baseline_;
  int64_t steps_ = 0;
  int64_t policy_version_ = 0;
  int64_t skipped_nonfinite_ = 0;
  StepPlan plan_;                    // this step's share, micro-batches and length buckets
  int64_t batch_action_tokens_ = 0;  // the whole batch's action tokens: every loss's N
};

}  // namespace sao::algo
