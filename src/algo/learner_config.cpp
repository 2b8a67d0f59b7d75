// Learner config presets, strict JSON reading and validation; see
// learner_config.hpp.
#include "algo/learner_config.hpp"

#include "model/device.hpp"

#include "base/error.hpp"
#include "base/host_port.hpp"

#include <nlohmann/json.hpp>

#include <cmath>

namespace sao::algo {

const char* algorithm_name(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kSao:
      return "sao";
    case Algorithm::kGrpo:
      return "grpo";
    case Algorithm::kPpo:
      return "ppo";
  }
  return "unknown";
}

const char* policy_loss_name(PolicyLossKind kind) {
  return kind == PolicyLossKind::kDis ? "dis" : "ppo";
}

const char* baseline_name(BaselineKind kind) {
  switch (kind) {
    case BaselineKind::kCritic:
      return "critic";
    case BaselineKind::kRunningMean:
      return "running_mean";
    case BaselineKind::kGroup:
      return "group";
  }
  return "unknown";
}

Algorithm algorithm_from_name(const std::string& name, const std::string& where) {
  for (auto a : {Algorithm::kSao, Algorithm::kGrpo, Algorithm::kPpo}) {
    if (name == algorithm_name(a)) return a;
  }
  throw Error(where + ".algorithm: unknown algorithm '" + name + "' (known: sao, grpo, ppo)");
}

namespace {

PolicyLossKind policy_loss_from_name(const std::string& name, const std::string& where) {
  if (name == "dis") return PolicyLossKind::kDis;
  if (name == "ppo") return PolicyLossKind::kPpo;
  throw Error(where + ".policy_loss: unknown policy loss '" + name + "' (known: dis, ppo)");
}

BaselineKind baseline_from_name(const std::string& name, const std::string& where) {
  for (auto b : {BaselineKind::kCritic, BaselineKind::kRunningMean, BaselineKind::kGroup}) {
    if (name == baseline_name(b)) return b;
  }
  throw Error(where + ".baseline: unknown baseline '" + name + "' (known: critic, running_mean, group)");
}

void require(bool condition, const std::string& where, const char* key, const std::string& message) {
  if (!condition) throw Error(where + "." + key + ": " + message);
}

}  // namespace

LearnerConfig LearnerConfig::preset(Algorithm algorithm) {
  LearnerConfig config;
  config.algorithm = algorithm;
  if (algorithm == Algorithm::kGrpo) {
    config.baseline = BaselineKind::kGroup;
    config.policy_loss = PolicyLossKind::kPpo;
    config.critic_warmup_steps = 0;
    config.freeze_critic_attention = false;
  } else if (algorithm == Algorithm::kPpo) {
    config.policy_loss = PolicyLossKind::kPpo;
    config.adaptive_lambda = false;
    config.lambda_policy = 0.95;
    config.lambda_critic = 0.95;
    config.critic_updates = 1;
    config.critic_warmup_steps = 0;
    config.freeze_critic_attention = false;
  }
  return config;
}

namespace {

using base::IntRange;
using base::RealRange;

// The ranges of the learner's number keys: wide enough for any experiment,
// narrow enough that no value overflows (1e308 clip widths) or never ends
// (critic_updates=4294967297).
constexpr RealRange kUnit{0.0, 1.0};
constexpr RealRange kClipWidth{0.0, 100.0};
constexpr RealRange kBeta{0.0, 1.0, false, true};

// Every key but the three names (algorithm, policy_loss, baseline), listed
// once for from_json and to_json.
template <typename Config, typename Visit>
void learner_keys(Config& c, Visit visit) {
  visit("gamma", c.gamma, kUnit);
  visit("lambda_critic", c.lambda_critic, kUnit);
  visit("adaptive_lambda", c.adaptive_lambda);
  visit("lambda_alpha", c.lambda_alpha, RealRange{0.0, 100.0, true, false});
  visit("lambda_policy", c.lambda_policy, kUnit);
  visit("normalize_advantages", c.normalize_advantages);
  visit("dis_eps_low", c.dis.eps_low, kUnit);
  visit("dis_eps_high", c.dis.eps_high, kClipWidth);
  visit("dis_detach_weight", c.dis.detach_weight);
  visit("ppo_eps_low", c.ppo.eps_low, RealRange{0.0, 1.0, false, true});
  visit("ppo_eps_high", c.ppo.eps_high, kClipWidth);
  visit("ppo_dual_clip", c.ppo.dual_clip, kClipWidth);  // 0, or > 1: checked in validate
  visit("critic_updates", c.critic_updates, IntRange{1, 1000});
  visit("critic_warmup_steps", c.critic_warmup_steps, IntRange{0, 100000000});
  visit("freeze_critic_attention", c.freeze_critic_attention);
  visit("value_clip", c.value_clip, RealRange{0.0, 1e6});  // 0 disables
  visit("actor_lr", c.actor_lr, kLearningRateRange);
  visit("critic_lr", c.critic_lr, kLearningRateRange);
  visit("weight_decay", c.weight_decay, kUnit);
  visit("adam_beta1", c.adam_beta1, kBeta);
  visit("adam_beta2", c.adam_beta2, kBeta);
  visit("adam_eps", c.adam_eps, RealRange{0.0, 1.0, true, false});
  visit("max_grad_norm", c.max_grad_norm, RealRange{0.0, 1e6});  // 0 disables clipping
  visit("group_size", c.group_size, IntRange{1, 4096});
  visit("grpo_scale_by_std", c.grpo_scale_by_std);
  visit("running_mean_window", c.running_mean_window, IntRange{1, 1 << 24});
  visit("pad_id", c.pad_id, IntRange{0, 1 << 24});
  visit("max_length_buckets", c.max_length_buckets, IntRange{1, 16});
  visit("micro_batch_tokens", c.micro_batch_tokens, IntRange{0, int64_t{1} << 30});
  visit("shard_optimizer", c.shard_optimizer);
  visit("activation_checkpointing", c.activation_checkpointing);
  visit("ranks", c.ranks, IntRange{1, 1024});
  visit("rank_address", c.rank_address);
  visit("rank_timeout_s", c.rank_timeout_s, IntRange{1, 86400});
  visit("rank_check_every", c.rank_check_every, IntRange{0, 100000000});
  visit("rank_network_private", c.rank_network_private);
  visit("device", c.device);
  visit("bf16_autocast", c.bf16_autocast);
  visit("lora_base_dtype", c.lora_base_dtype);
}
}  // namespace

LearnerConfig LearnerConfig::from_json(base::JsonReader& reader) {
  std::string algorithm = "sao";
  reader.read("algorithm", algorithm);
  LearnerConfig c = preset(algorithm_from_name(algorithm, reader.where()));
  std::string policy_loss = policy_loss_name(c.policy_loss);
  std::string baseline = baseline_name(c.baseline);
  reader.read("policy_loss", policy_loss);
  reader.read("baseline", baseline);
  c.policy_loss = policy_loss_from_name(policy_loss, reader.where());
  c.baseline = baseline_from_name(baseline, reader.where());
  learner_keys(c, base::ReadKeys{reader});
  reader.reject_unknown_keys();
  c.validate(reader.where());
  return c;
}

nlohmann::json LearnerConfig::to_json() const {
  nlohmann::json json = {{"algorithm", algorithm_name(algorithm)},
                         {"policy_loss", policy_loss_name(policy_loss)},
                         {"baseline", baseline_name(baseline)}};
  learner_keys(*this, base::WriteKeys{json});
  return json;
}

void LearnerConfig::validate(const std::string& where) const {
  learner_keys(*this, base::CheckRanges{where});
  require(ppo.dual_clip == 0 || ppo.dual_clip > 1, where, "ppo_dual_clip", "must be > 1 (or 0 to disable)");
  model::parse_device(device, where + ".device");
  base::parse_host_port(rank_address, where + ".rank_address");
  if (lora_base_dtype != "auto" && lora_base_dtype != "fp32" && lora_base_dtype != "bf16") {
    throw Error(where + ".lora_base_dtype: expected \"auto\", \"fp32\" or \"bf16\", got \"" + lora_base_dtype + "\"");
  }
}

bool LearnerConfig::lora_base_bf16() const {
  if (lora_base_dtype == "auto") return model::parse_device(device, "learner.device").is_cuda();
  return lora_base_dtype == "bf16";
}

}  // namespace sao::algo
