// Learner config presets, strict JSON reading and validation; see
// learner_config.hpp.
#include "algo/learner_config.hpp"

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
  reader.read("gamma", c.gamma);
  reader.read("lambda_critic", c.lambda_critic);
  reader.read("adaptive_lambda", c.adaptive_lambda);
  reader.read("lambda_alpha", c.lambda_alpha);
  reader.read("lambda_policy", c.lambda_policy);
  reader.read("normalize_advantages", c.normalize_advantages);
  reader.read("dis_eps_low", c.dis.eps_low);
  reader.read("dis_eps_high", c.dis.eps_high);
  reader.read("dis_detach_weight", c.dis.detach_weight);
  reader.read("ppo_eps_low", c.ppo.eps_low);
  reader.read("ppo_eps_high", c.ppo.eps_high);
  reader.read("ppo_dual_clip", c.ppo.dual_clip);
  reader.read("critic_updates", c.critic_updates);
  reader.read("critic_warmup_steps", c.critic_warmup_steps);
  reader.read("freeze_critic_attention", c.freeze_critic_attention);
  reader.read("value_clip", c.value_clip);
  reader.read("actor_lr", c.actor_lr);
  reader.read("critic_lr", c.critic_lr);
  reader.read("weight_decay", c.weight_decay);
  reader.read("adam_beta1", c.adam_beta1);
  reader.read("adam_beta2", c.adam_beta2);
  reader.read("adam_eps", c.adam_eps);
  reader.read("max_grad_norm", c.max_grad_norm);
  reader.read("group_size", c.group_size);
  reader.read("grpo_scale_by_std", c.grpo_scale_by_std);
  reader.read("running_mean_window", c.running_mean_window);
  reader.read("pad_id", c.pad_id);
  reader.reject_unknown_keys();
  c.validate(reader.where());
  return c;
}

nlohmann::json LearnerConfig::to_json() const {
  return {{"algorithm", algorithm_name(algorithm)},
          {"policy_loss", policy_loss_name(policy_loss)},
          {"baseline", baseline_name(baseline)},
          {"gamma", gamma},
          {"lambda_critic", lambda_critic},
          {"adaptive_lambda", adaptive_lambda},
          {"lambda_alpha", lambda_alpha},
          {"lambda_policy", lambda_policy},
          {"normalize_advantages", normalize_advantages},
          {"dis_eps_low", dis.eps_low},
          {"dis_eps_high", dis.eps_high},
          {"dis_detach_weight", dis.detach_weight},
          {"ppo_eps_low", ppo.eps_low},
          {"ppo_eps_high", ppo.eps_high},
          {"ppo_dual_clip", ppo.dual_clip},
          {"critic_updates", critic_updates},
          {"critic_warmup_steps", critic_warmup_steps},
          {"freeze_critic_attention", freeze_critic_attention},
          {"value_clip", value_clip},
          {"actor_lr", actor_lr},
          {"critic_lr", critic_lr},
          {"weight_decay", weight_decay},
          {"adam_beta1", adam_beta1},
          {"adam_beta2", adam_beta2},
          {"adam_eps", adam_eps},
          {"max_grad_norm", max_grad_norm},
          {"group_size", group_size},
          {"grpo_scale_by_std", grpo_scale_by_std},
          {"running_mean_window", running_mean_window},
          {"pad_id", pad_id}};
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
}

}  // namespace sao::algo
