// Trajectories as the learner sees them, and their collation into padded
// tensors. Why a flat per-token layout: a multi-turn agentic episode is one
// token sequence in which policy-generated (action) tokens and
// environment-written (observation/prompt) tokens alternate; keeping every
// per-token field the same length as `tokens` makes the masks trivial and
// lets `validate()` point at the exact position that is wrong.
//
// Position convention (used by every function in src/algo):
//   everything is indexed by TOKEN position t. The log-prob of token t comes
//   from the policy's logits at position t-1, and the value V_t of an action
//   token t is the critic's output at position t-1, i.e. the value of the
//   state just before the policy emitted token t. Token 0 can therefore never
//   be an action (a trajectory starts with at least one prompt token, e.g.
//   BOS). The bootstrap value of a truncated trajectory is the critic's output
//   at its LAST token (the state after everything that happened).
#pragma once

#include "model/generation.hpp"

#include <torch/types.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace sao::algo {

// Where an episode came from. The maths never reads it; it travels with the
// trajectory from the rollout to the learner (unchanged, in the same
// struct) for the step's metrics: latency, drift regime, turns.
struct EpisodeOrigin {
  std::string rollout;                                             // actor that played it, e.g. "rollout-0"
  int64_t turns = 0;                                               // policy turns in the episode
  int64_t finished_at_ns = 0;                                      // steady clock when the episode ended
  double regime_index = std::numeric_limits<double>::quiet_NaN();  // drifting envs: regime at the end
};

struct Trajectory {
  std::vector<int64_t> tokens;                                 // all ids: prompt, actions, observations
  std::vector<uint8_t> action_mask;                            // 1 where the policy generated the token
  std::vector<float> behaviour_logprobs;                       // sampling log-prob per token; 0 at non-actions
  std::vector<int64_t> policy_versions;                        // weight version per token; -1 at non-actions
  std::vector<float> rewards;                                  // per token; non-zero only on action tokens
  bool terminated = true;                                      // episode ended: next value after the last action is 0
  bool truncated = false;                                      // cut by a cap: bootstrap from the critic
  int64_t group_id = 0;                                        // prompt/group id (GRPO groups share it)
  double accuracy = std::numeric_limits<double>::quiet_NaN();  // task accuracy, NaN when undefined
  EpisodeOrigin origin;

  size_t size() const { return tokens.size(); }
  int64_t num_action_tokens() const;
  double total_reward() const;     // sum of per-token rewards (the return at gamma = 1)
  int64_t oldest_version() const;  // min policy version over action tokens
  // Throws sao::Error naming `where` and the problem: lengths differ, no
  // token, first token is an action, no action token, reward on a
  // non-action token, negative version on an action, both/neither of
  // terminated and truncated. Non-finite rewards/log-probs are NOT rejected
  // here: the learner counts them and skips the step.
  void validate(const std::string& where) const;
};

// One policy turn of a multi-turn episode: generated tokens, then the
// environment's observation (may be empty for the last turn).
struct Turn {
  std::vector<int64_t> action_tokens;
  std::vector<float> logprobs;    // one per action token
  std::vector<int64_t> versions;  // one per action token
  double reward = 0.0;            // per-turn reward, placed on the turn's last action token
  std::vector<int64_t> observation;
};

// Builds prompt + turns; `outcome_reward` is added on the LAST action token
// of the episode. Throws sao::Error if the result does not validate.
Trajectory make_trajectory(const std::vector<int64_t>& prompt, const std::vector<Turn>& turns, double outcome_reward,
                           bool terminated, int64_t group_id = 0);
// Single-turn convenience for a sequence from model::generate. Whether the
// episode terminated or was truncated is the environment's call (a one-token
// bandit ends after max_new_tokens = 1 yet is terminated), so it is passed in.
Trajectory trajectory_from_generation(const std::vector<int64_t>& prompt, const model::GeneratedSequence& sequence,
                                      double outcome_reward, bool terminated, int64_t group_id = 0);

// B trajectories right-padded to T = the longest length. All tensors on CPU.
struct TrajectoryBatch {
  torch::Tensor input_ids;           // [B, T] int64, pad_id after each trajectory's end
  torch::Tensor action_mask;         // [B, T] bool, true where token t is an action (padding false)
  torch::Tensor valid_mask;          // [B, T] bool, true at real (non-padding) tokens
  torch::Tensor behaviour_logprobs;  // [B, T] float32, 0 at non-actions
  torch::Tensor versions;            // [B, T] int64, -1 at non-actions
  torch::Tensor rewards;             // [B, T] float32, 0 at non-actions
  torch::Tensor terminated;          // [B] bool (false = truncated: bootstrap)
  torch::Tensor lengths;             // [B] int64, real tokens per trajectory
  torch::Tensor num_actions;         // [B] int64, action tokens per trajectory
  torch::Tensor group_ids;           // [B] int64
  torch::Tensor returns;             // [B] float64, total reward per trajectory
  int64_t batch_size() const { return input_ids.size(0); }
  int64_t max_length() const { return input_ids.size(1); }
};

// Validates every trajectory (messages name "trajectory i") and pads.
TrajectoryBatch collate(const std::vector<Trajectory>& trajectories, int64_t pad_id = 0);

}  // namespace sao::algo
