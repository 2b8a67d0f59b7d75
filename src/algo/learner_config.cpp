// Learner config presets, strict JSON reading and validation; see
// learner_config.hpp.
#include "algo/learner_config.hpp"

#include "model/device.hpp"

#include "base/error.hpp"

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
// Every key but the three names (algorithm, policy_loss, baseline), listed
// once for from_json and to_json.
template <typename Config, typename Visit>
void learner_keys(Config& c, Visit visit) {
  visit("gamma", c.gamma);
  visit("lambda_critic", c.lambda_critic);
  visit("adaptive_lambda", c.adaptive_lambda);
  visit("lambda_alpha", c.lambda_alpha);
  visit("lambda_policy", c.lambda_policy);
  visit("normalize_advantages", c.normalize_advantages);
  visit("dis_eps_low", c.dis.eps_low);
  visit("dis_eps_high", c.dis.eps_high);
  visit("dis_detach_weight", c.dis.detach_weight);
  visit("ppo_eps_low", c.ppo.eps_low);
  visit("ppo_eps_high", c.ppo.eps_high);
  visit("ppo_dual_clip", c.ppo.dual_clip);
  visit("critic_updates", c.critic_updates);
  visit("critic_warmup_steps", c.critic_warmup_steps);
  visit("freeze_critic_attention", c.freeze_critic_attention);
  visit("value_clip", c.value_clip);
  visit("actor_lr", c.actor_lr);
  visit("critic_lr", c.critic_lr);
  visit("weight_decay", c.weight_decay);
  visit("adam_beta1", c.adam_beta1);
  visit("adam_beta2", c.adam_beta2);
  visit("adam_eps", c.adam_eps);
  visit("max_grad_norm", c.max_grad_norm);
  visit("group_size", c.group_size);
  visit("grpo_scale_by_std", c.grpo_scale_by_std);
  visit("running_mean_window", c.running_mean_window);
  visit("pad_id", c.pad_id);
  visit("max_length_buckets", c.max_length_buckets);
  visit("device", c.device);
  visit("bf16_autocast", c.bf16_autocast);
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
  auto in_unit = [](double x) { return x >= 0.0 && x <= 1.0; };
  require(in_unit(gamma), where, "gamma", "must be in [0, 1]");
  require(in_unit(lambda_critic), where, "lambda_critic", "must be in [0, 1]");
  require(in_unit(lambda_policy), where, "lambda_policy", "must be in [0, 1]");
  require(lambda_alpha > 0, where, "lambda_alpha", "must be > 0");
  require(in_unit(dis.eps_low), where, "dis_eps_low", "must be in [0, 1]");
  require(dis.eps_high >= 0 && std::isfinite(dis.eps_high), where, "dis_eps_high", "must be >= 0");
  require(ppo.eps_low >= 0 && ppo.eps_low < 1, where, "ppo_eps_low", "must be in [0, 1)");
  require(ppo.eps_high >= 0 && std::isfinite(ppo.eps_high), where, "ppo_eps_high", "must be >= 0");
  require(ppo.dual_clip == 0 || ppo.dual_clip > 1, where, "ppo_dual_clip", "must be > 1 (or 0 to disable)");
  require(critic_updates >= 1, where, "critic_updates", "must be >= 1");
  require(critic_warmup_steps >= 0, where, "critic_warmup_steps", "must be >= 0");
  require(value_clip >= 0, where, "value_clip", "must be >= 0 (0 disables)");
  require(actor_lr > 0 && std::isfinite(actor_lr), where, "actor_lr", "must be > 0");
  require(critic_lr > 0 && std::isfinite(critic_lr), where, "critic_lr", "must be > 0");
  require(weight_decay >= 0, where, "weight_decay", "must be >= 0");
  require(adam_beta1 >= 0 && adam_beta1 < 1, where, "adam_beta1", "must be in [0, 1)");
  require(adam_beta2 >= 0 && adam_beta2 < 1, where, "adam_beta2", "must be in [0, 1)");
  require(adam_eps > 0, where, "adam_eps", "must be > 0");
  require(max_grad_norm >= 0, where, "max_grad_norm", "must be >= 0 (0 disables clipping)");
  require(group_size >= 1, where, "group_size", "must be >= 1");
  require(running_mean_window >= 1, where, "running_mean_window", "must be >= 1");
  require(pad_id >= 0, where, "pad_id", "must be >= 0");
  require(max_length_buckets >= 1 && max_length_buckets <= 16, where, "max_length_buckets", "must be in [1, 16]");
  model::parse_device(device, where + ".device");
}

}  // namespace sao::algo
