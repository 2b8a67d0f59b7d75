// Learner hyper-parameters. Why one struct for SAO, GRPO and PPO: the
// paper's comparisons and ablations only make sense if the three algorithms
// share every line of code that they do not deliberately differ in, so an
// algorithm is a PRESET of switches (baseline, policy loss, lambda rule,
// critic schedule), and an ablation is the preset with one switch flipped.
//
// JSON (strict: unknown keys are errors naming key and file). "algorithm"
// is read first and selects the preset; every other key overrides it:
//   {"algorithm": "sao", "actor_lr": 1e-4, "critic_updates": 1, ...}
#pragma once

#include "algo/losses.hpp"
#include "base/json_reader.hpp"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>

namespace sao::algo {

// The learning rates' range, in the config and as live knobs alike.
inline constexpr base::RealRange kLearningRateRange{0.0, 1.0, true, false};

enum class Algorithm { kSao, kGrpo, kPpo };
enum class PolicyLossKind { kDis, kPpo };
// kCritic: learned value model; kRunningMean: mean of the last N returns;
// kGroup: GRPO group mean (and std).
enum class BaselineKind { kCritic, kRunningMean, kGroup };

const char* algorithm_name(Algorithm algorithm);
const char* policy_loss_name(PolicyLossKind kind);
const char* baseline_name(BaselineKind kind);

struct LearnerConfig {
  Algorithm algorithm = Algorithm::kSao;
  PolicyLossKind policy_loss = PolicyLossKind::kDis;  // "dis" | "ppo"
  BaselineKind baseline = BaselineKind::kCritic;      // "critic" | "running_mean" | "group"

  // Advantages / targets.
  double gamma = 1.0;
  double lambda_critic = 1.0;         // GAE lambda of the critic targets
  bool adaptive_lambda = true;        // actor lambda = clamp(1 - 1/(alpha L), 0, 1) per trajectory
  double lambda_alpha = 1.5;          // alpha above (VAPO uses 0.05)
  double lambda_policy = 0.95;        // fixed actor lambda when !adaptive_lambda
  bool normalize_advantages = false;  // mean/std over the batch's action tokens

  // Policy losses.
  DisOptions dis;      // eps_low 0.3, eps_high 5.0, detached weight
  PpoClipOptions ppo;  // eps 0.2 / 0.2, no dual clip

  // Critic schedule (baseline == kCritic only).
  int64_t critic_updates = 2;        // K optimiser steps on the same fixed targets
  int64_t critic_warmup_steps = 10;  // W first learner steps train only the critic
  bool freeze_critic_attention = true;
  double value_clip = 0.0;  // > 0: PPO-style value clipping around the snapshot

  // Optimisation (AdamW for both models).
  // Measured on the default model (docs/decisions.md): 5e-5 gained nothing
  // on held-out problems, 1e-5 with a 10x faster critic gained on every seed.
  double actor_lr = 1e-5;
  double critic_lr = 5e-3;
  double weight_decay = 0.01;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_eps = 1e-8;
  double max_grad_norm = 1.0;  // per model; 0 disables clipping (the norm is still reported)

  // Baselines without a critic.
  int64_t group_size = 8;         // GRPO: every group in a batch must have exactly this many members
  bool grpo_scale_by_std = true;  // false = Dr.GRPO
  int64_t running_mean_window = 128;

  // Collation. (Staleness admission is replay's alone: replay/replay_buffer.hpp.)
  int64_t pad_id = 0;
  // Forward and backward passes run on up to this many groups of rows of
  // similar length, each at its own width, so a batch of mixed lengths
  // (multi-turn episodes) does not compute its padding; 1 = one batch padded
  // to the longest row. Same maths either way (algo/length_buckets.hpp).
  int64_t max_length_buckets = 4;
  // Gradient accumulation: each rank's rows run in micro-batches of at most
  // this many padded tokens (rows x longest row), one backward each, so the
  // activations held at once are one micro-batch's; the gradient is the
  // whole batch's (same maths, algo/step_plan.hpp). 0 = one pass.
  int64_t micro_batch_tokens = 0;
  // ZeRO-1: with several ranks each keeps the AdamW moments of ~1/N of the
  // parameters (algo/sharded_adamw.hpp). Same updates; checkpoints stay one
  // complete state that resumes with any number of ranks.
  bool shard_optimizer = false;
  // Keep only each decoder layer's input through a training pass and
  // recompute the layer in backward (model/activation_checkpoint.hpp): less
  // activation memory for one more forward pass. Same gradients.
  bool activation_checkpointing = false;

  // Data-parallel learner ranks (algo/rank_group.hpp, learner_ranks.hpp):
  // rank 0 is the run's learner; ranks 1..ranks-1 are `sao node --role
  // learner-rank` processes that join rank_address (rank 0's c10d
  // rendezvous; its port carries c10d's own unauthenticated protocol, so
  // keep it on the learners' private network). rank_timeout_s bounds the
  // rendezvous and every collective; rank_check_every compares the ranks'
  // weights every that many steps (0 = never).
  int64_t ranks = 1;
  std::string rank_address = "127.0.0.1:29400";
  int64_t rank_timeout_s = 300;
  int64_t rank_check_every = 50;
  // A rank_address off loopback is refused unless this says the network
  // between the learners is private (config/run_config.cpp says why).
  bool rank_network_private = false;

  // Placement: where the learner's policy and critic live ("cpu", "cuda",
  // "cuda:N"), and bf16 autocast of their forward and backward passes on
  // CUDA (log-probs, the DIS ratio and every loss stay fp32).
  std::string device = "cpu";
  bool bf16_autocast = false;
  // Where a LoRA policy's frozen base is kept on the learner: "auto" (bf16
  // on CUDA; fp32 elsewhere, as CPUs without bf16 units run it slower),
  // "fp32" or "bf16". Adapters, their gradients and AdamW moments stay fp32;
  // weight sync sends the base to rollouts as fp32 (exact), checkpoints
  // store it as bf16. Ignored without model.lora.
  std::string lora_base_dtype = "auto";
  // Whether lora_base_dtype resolves to bf16 on `device`.
  bool lora_base_bf16() const;

  bool uses_critic() const { return baseline == BaselineKind::kCritic; }

  // The defaults of each algorithm (SAO.md): sao = the struct defaults;
  // grpo = group baseline + PPO clip 0.2, no critic; ppo = critic + PPO clip,
  // single fixed lambda 0.95 for critic and actor, K = 1, no warm-up, no
  // frozen attention.
  static LearnerConfig preset(Algorithm algorithm);
  // Throws sao::Error naming reader.where() and the key.
  static LearnerConfig from_json(base::JsonReader& reader);
  nlohmann::json to_json() const;
  // Throws sao::Error naming `where` and the offending key.
  void validate(const std::string& where) const;
};

Algorithm algorithm_from_name(const std::string& name, const std::string& where);

}  // namespace sao::algo
