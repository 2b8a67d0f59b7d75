// The learner step as a whole: config presets and strict reading, the SAO
// critic schedule (fixed targets for the K updates, warm-up, frozen
// attention), non-finite skips that leave every weight bit-identical,
// GRPO/PPO modes, staleness accounting, log-prob agreement at lag 0, and
// checkpoints that resume bit-identically.
#include "algo/learner.hpp"
#include "base/error.hpp"
#include "base/json_reader.hpp"
#include "model/generation.hpp"
#include "model/transformer.hpp"
#include "test_tiny_model.hpp"

#include <doctest/doctest.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using sao::algo::Learner;
using sao::algo::LearnerConfig;
using sao::algo::Trajectory;
using sao::model::CausalLM;
using sao::model::ModelConfig;
using Models = sao_test::LearnerModels;
using sao::model::ValueModel;

namespace {

auto make_models(uint64_t seed) {
  return sao_test::tiny_learner_models(seed);
}

// Behaviour log-probs: the policy's own, perturbed by up to +-0.1 so that
// ratios are not all exactly 1.
void set_behaviour_logprobs(CausalLM& policy, Trajectory& tr, std::mt19937_64& rng) {
  torch::NoGradGuard no_grad;
  auto ids = torch::tensor(tr.tokens, torch::kInt64).unsqueeze(0);
  auto logp = sao::algo::policy_outputs(policy, ids).logprobs[0];
  for (size_t t = 0; t < tr.size(); ++t) {
    if (!tr.action_mask[t]) continue;
    const double noise = 0.2 * (static_cast<double>(rng() % 1000) / 1000.0 - 0.5);
    tr.behaviour_logprobs[t] = static_cast<float>(logp[static_cast<int64_t>(t)].item<double>() + noise);
  }
}

// n trajectories: prompt (2 tokens), a 2-3 token action turn, a 2-token
// observation, a 1-2 token action turn; reward 0/1 on the last action;
// every third truncated.
std::vector<Trajectory> make_batch(CausalLM& policy, uint64_t seed, int n = 4, int64_t version = 0) {
  std::mt19937_64 rng(seed);
  auto token = [&] { return static_cast<int64_t>(2 + rng() % 14); };
  std::vector<Trajectory> batch;
  for (int i = 0; i < n; ++i) {
    sao::algo::Turn first, second;
    const int a = 2 + static_cast<int>(rng() % 2), b = 1 + static_cast<int>(rng() % 2);
    for (int k = 0; k < a; ++k) first.action_tokens.push_back(token());
    first.observation = {token(), token()};
    for (int k = 0; k < b; ++k) second.action_tokens.push_back(token());
    for (auto* turn : {&first, &second}) {
      turn->logprobs.assign(turn->action_tokens.size(), 0.0f);
      turn->versions.assign(turn->action_tokens.size(), version);
    }
    auto tr = sao::algo::make_trajectory({1, token()}, {first, second}, static_cast<double>(rng() % 2),
                                         /*terminated=*/i % 3 != 2, /*group_id=*/i);
    tr.accuracy = tr.total_reward();
    set_behaviour_logprobs(policy, tr, rng);
    batch.push_back(tr);
  }
  return batch;
}

std::vector<torch::Tensor> snapshot(torch::nn::Module& module) {
  std::vector<torch::Tensor> out;
  for (auto& p : module.parameters()) out.push_back(p.detach().clone());
  return out;
}

bool all_equal(torch::nn::Module& module, const std::vector<torch::Tensor>& before) {
  auto params = module.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    if (!torch::equal(params[i], before[i])) return false;
  }
  return true;
}

bool modules_equal(torch::nn::Module& a, torch::nn::Module& b) {
  auto pa = a.named_parameters();
  auto pb = b.named_parameters();
  for (const auto& item : pa) {
    if (!torch::equal(item.value(), pb[item.key()])) {
      MESSAGE("differs: " << item.key());
      return false;
    }
  }
  return true;
}

LearnerConfig sao_config() {
  LearnerConfig config;
  config.actor_lr = 1e-3;
  config.critic_lr = 5e-3;
  config.critic_warmup_steps = 0;
  return config;
}

std::string temp_dir(const std::string& stem) {
  static std::atomic<int> counter{0};
  auto dir = fs::temp_directory_path() /
             ("sao_algo_" + stem + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  fs::remove_all(dir);
  return dir.string();
}

bool throws_with(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
  } catch (const sao::Error& e) {
    const std::string message = e.what();
    if (message.find(needle) != std::string::npos) return true;
    MESSAGE("message was: " << message);
  }
  return false;
}

LearnerConfig config_from(const nlohmann::json& json) {
  sao::base::JsonReader reader(json, "run.json: learner");
  return LearnerConfig::from_json(reader);
}

// Episodes sampled from `policy` itself (temperature 1, no top-k/top-p),
// recorded at `version`: prompts of 2-4 tokens, up to 6 generated, token 3
// stops a row early so the lengths differ. `action_tokens` counts what was generated.
std::vector<Trajectory> sample_batch(CausalLM& policy, int64_t version, uint64_t seed, int64_t& action_tokens) {
  sao::model::SamplingConfig sampling;
  sampling.max_new_tokens = 6;
  sampling.stop_tokens = {3};
  REQUIRE(sampling.samples_policy_distribution());
  const std::vector<std::vector<int64_t>> prompts = {{1, 5}, {1, 7, 9}, {1, 4, 6, 8}, {1, 12}, {1, 10, 11}};
  torch::NoGradGuard no_grad;
  const auto sequences = sao::model::generate(policy, prompts, sampling, seed, version);
  std::vector<Trajectory> batch;
  action_tokens = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    action_tokens += static_cast<int64_t>(sequences[i].tokens.size());
    batch.push_back(sao::algo::trajectory_from_generation(prompts[i], sequences[i], static_cast<double>(i % 2),
                                                          /*terminated=*/true, static_cast<int64_t>(i)));
  }
  return batch;
}

// Adds `delta` to the behaviour log-prob of the trajectory's first action token.
void perturb_first_action(Trajectory& tr, float delta) {
  for (size_t t = 0; t < tr.size(); ++t) {
    if (!tr.action_mask[t]) continue;
    tr.behaviour_logprobs[t] += delta;
    return;
  }
}

}  // namespace

TEST_CASE("learner config: SAO defaults, presets, strict JSON") {
  LearnerConfig sao;
  CHECK(sao.dis.eps_low == 0.3);
  CHECK(sao.dis.eps_high == 5.0);
  CHECK(sao.critic_updates == 2);
  CHECK(sao.critic_warmup_steps == 10);
  CHECK(sao.lambda_alpha == 1.5);
  CHECK(sao.lambda_critic == 1.0);
  CHECK(sao.gamma == 1.0);
  CHECK(sao.group_size == 8);
  CHECK(sao.ppo.eps_low == 0.2);
  CHECK(sao.freeze_critic_attention);
  CHECK(sao.uses_critic());

  auto grpo = config_from({{"algorithm", "grpo"}, {"actor_lr", 1e-4}});
  CHECK((grpo.baseline == sao::algo::BaselineKind::kGroup));
  CHECK((grpo.policy_loss == sao::algo::PolicyLossKind::kPpo));
  CHECK(grpo.actor_lr == 1e-4);
  auto ppo = config_from({{"algorithm", "ppo"}});
  CHECK_FALSE(ppo.adaptive_lambda);
  CHECK(ppo.lambda_policy == ppo.lambda_critic);
  // An ablation is the SAO preset with one switch flipped.
  auto ablation = config_from({{"baseline", "running_mean"}, {"policy_loss", "ppo"}, {"critic_updates", 1}});
  CHECK((ablation.baseline == sao::algo::BaselineKind::kRunningMean));
  CHECK(ablation.dis.eps_high == 5.0);

  CHECK(throws_with([] { config_from({{"learing_rate", 1.0}}); }, "run.json: learner: unknown key 'learing_rate'"));
  CHECK(throws_with([] { config_from({{"dis_eps_low", 1.5}}); }, "run.json: learner.dis_eps_low"));
  CHECK(throws_with([] { config_from({{"algorithm", "trpo"}}); }, "unknown algorithm 'trpo'"));
  CHECK(throws_with([] { config_from({{"baseline", "zero"}}); }, "run.json: learner.baseline"));
  CHECK(throws_with([] { config_from({{"critic_updates", "two"}}); }, "run.json: learner.critic_updates"));
  CHECK(throws_with([] { config_from({{"ppo_dual_clip", 0.5}}); }, "ppo_dual_clip"));

  auto round_trip = config_from(grpo.to_json());
  CHECK(round_trip.to_json() == grpo.to_json());
}

TEST_CASE("learner construction checks the critic") {
  auto m = make_models(1);
  CHECK(throws_with([&] { Learner(sao_config(), m.policy); }, "needs a value model"));
  auto grpo = LearnerConfig::preset(sao::algo::Algorithm::kGrpo);
  CHECK(throws_with([&] { Learner(grpo, m.policy, m.critic); }, "would never be trained"));
  // Freezing attention on a model without attention fails loudly.
  struct HeadOnly : torch::nn::Module {
    HeadOnly() { register_module("score", torch::nn::Linear(4, 1)); }
  } head_only;
  CHECK(throws_with([&] { sao::algo::freeze_attention(head_only); }, "no parameter in it"));
}

TEST_CASE("an SAO step reports every metric of SAO.md") {
  auto m = make_models(2);
  Learner learner(sao_config(), m.policy, m.critic);
  auto batch = make_batch(m.policy, 3, 6);
  batch[0].rewards[batch[0].size() - 1] = 1.0f;  // rewards differ -> explained variance defined
  batch[1].rewards[batch[1].size() - 1] = 0.0f;
  auto result = learner.step(batch);
  for (const char* key : {"reward_mean",        "batch_accuracy",   "policy_loss",          "value_loss",
                          "explained_variance", "entropy",          "dis_reject_low_frac",  "dis_reject_high_frac",
                          "ratio_mean",         "ratio_max",        "staleness_mean",       "staleness_max",
                          "grad_norm",          "tokens",           "skipped_nonfinite",    "critic_only",
                          "value_grad_norm",    "staleness_hist_0", "learner_tokens_per_s", "step_seconds",
                          "value_loss_final",   "action_tokens"}) {
    INFO(key);
    CHECK(result.metrics.count(key) == 1);
  }
  for (const auto& [key, value] : result.metrics) {
    INFO(key);
    CHECK(std::isfinite(value));
  }
  CHECK(result.policy_updated);
  CHECK(result.critic_updates == 2);
  CHECK(learner.policy_version() == 1);
  CHECK(result.metrics["critic_only"] == 0.0);
  CHECK(result.metrics["ratio_max"] > 1.0);  // the behaviour log-probs were perturbed
  CHECK(result.metrics["staleness_hist_0"] == result.metrics["action_tokens"]);
  CHECK(result.metrics["value_loss_final"] < result.metrics["value_loss"]);
}

TEST_CASE("the K critic updates all use the targets of the snapshot") {
  auto m = make_models(4);
  auto config = sao_config();
  config.critic_warmup_steps = 100;  // critic only
  config.lambda_critic = 0.5;        // targets depend on V, so recomputing them would show
  config.max_grad_norm = 0.0;
  config.critic_updates = 2;
  auto fixed = sao::model::clone_value_model(m.critic);
  auto recomputed = sao::model::clone_value_model(m.critic);
  auto trajectories = make_batch(m.policy, 5, 5);
  Learner learner(config, m.policy, m.critic);
  auto result = learner.step(trajectories);
  REQUIRE(result.critic_updates == 2);

  auto batch = sao::algo::collate(trajectories);
  auto gae_targets = [&](ValueModel& critic) {
    torch::NoGradGuard no_grad;
    auto out = sao::algo::critic_outputs(critic, batch.input_ids, batch.lengths);
    return sao::algo::skip_observation_gae(batch.rewards, out.values, batch.action_mask, batch.terminated,
                                           out.bootstrap, 1.0, sao::algo::constant_lambda(5, 0.5))
        .returns;
  };
  auto replay = [&](ValueModel& critic, bool recompute) {
    sao::algo::freeze_attention(*critic);
    std::vector<torch::Tensor> params;
    for (auto& p : critic->parameters()) {
      if (p.requires_grad()) params.push_back(p);
    }
    torch::optim::AdamW optimizer(params, torch::optim::AdamWOptions(config.critic_lr)
                                              .betas(std::make_tuple(config.adam_beta1, config.adam_beta2))
                                              .eps(config.adam_eps)
                                              .weight_decay(config.weight_decay));
    auto targets = gae_targets(critic);
    for (int k = 0; k < 2; ++k) {
      if (recompute && k > 0) targets = gae_targets(critic);
      optimizer.zero_grad();
      auto out = sao::algo::critic_outputs(critic, batch.input_ids, batch.lengths);
      sao::algo::value_loss(out.values, targets, batch.action_mask).backward();
      optimizer.step();
    }
  };
  CHECK(torch::equal(gae_targets(fixed), result.critic_targets));
  replay(fixed, false);
  replay(recomputed, true);
  CHECK(modules_equal(*learner.critic(), *fixed));
  CHECK_FALSE(modules_equal(*learner.critic(), *recomputed));
}

TEST_CASE("critic warm-up trains only the critic for W steps") {
  auto m = make_models(6);
  auto config = sao_config();
  config.critic_warmup_steps = 2;
  Learner learner(config, m.policy, m.critic);
  auto policy_before = snapshot(*m.policy);
  auto critic_before = snapshot(*m.critic);
  for (int step = 0; step < 2; ++step) {
    auto result = learner.step(make_batch(m.policy, 10 + step));
    CHECK(result.metrics["critic_only"] == 1.0);
    CHECK_FALSE(result.policy_updated);
    CHECK(result.metrics.count("policy_loss") == 1);  // still reported
  }
  CHECK(all_equal(*m.policy, policy_before));
  CHECK_FALSE(all_equal(*m.critic, critic_before));
  CHECK(learner.policy_version() == 0);
  auto result = learner.step(make_batch(m.policy, 12));
  CHECK(result.metrics["critic_only"] == 0.0);
  CHECK(result.policy_updated);
  CHECK(learner.policy_version() == 1);
  CHECK_FALSE(all_equal(*m.policy, policy_before));
}

TEST_CASE("frozen critic attention is unchanged after a step while its MLP moved") {
  for (bool freeze : {true, false}) {
    CAPTURE(freeze);
    auto m = make_models(7);
    auto config = sao_config();
    config.freeze_critic_attention = freeze;
    auto critic_before = sao::model::clone_value_model(m.critic);
    auto policy_before = sao::model::clone_policy(m.policy);
    Learner learner(config, m.policy, m.critic);
    learner.step(make_batch(m.policy, 8, 6));
    auto before = critic_before->named_parameters();
    for (const auto& item : m.critic->named_parameters()) {
      INFO(item.key());
      const auto group = sao::model::param_group_of(item.key());
      const bool unchanged = torch::equal(item.value(), before[item.key()]);
      if (group == sao::model::ParamGroup::kAttention) CHECK(unchanged == freeze);
      if (group == sao::model::ParamGroup::kMlp || group == sao::model::ParamGroup::kHead) CHECK_FALSE(unchanged);
    }
    // The policy's attention is never frozen.
    auto policy_params = policy_before->named_parameters();
    CHECK_FALSE(torch::equal(m.policy->model->layers->ptr<sao::model::DecoderLayerImpl>(0)->self_attn->q_proj->weight,
                             policy_params["model.layers.0.self_attn.q_proj.weight"]));
  }
}

TEST_CASE("a non-finite reward or behaviour log-prob skips the step and leaves the weights bit-identical") {
  for (int variant = 0; variant < 2; ++variant) {
    CAPTURE(variant);
    auto m = make_models(9);
    Learner learner(sao_config(), m.policy, m.critic);
    auto batch = make_batch(m.policy, 11);
    if (variant == 0) {
      batch[1].rewards[batch[1].size() - 1] = std::nanf("");
    } else {
      batch[2].behaviour_logprobs[batch[2].size() - 1] = -std::numeric_limits<float>::infinity();
    }
    auto policy_before = snapshot(*m.policy);
    auto critic_before = snapshot(*m.critic);
    auto result = learner.step(batch);
    CHECK(result.skipped_nonfinite);
    CHECK_FALSE(result.policy_updated);
    CHECK(result.metrics["step_skipped"] == 1.0);
    CHECK(result.metrics["skipped_nonfinite"] == 1.0);
    CHECK(learner.skipped_nonfinite() == 1);
    CHECK(learner.policy_version() == 0);
    CHECK(all_equal(*m.policy, policy_before));
    CHECK(all_equal(*m.critic, critic_before));
    // The next good batch trains normally.
    auto next = learner.step(make_batch(m.policy, 12));
    CHECK(next.policy_updated);
    CHECK(next.metrics["skipped_nonfinite"] == 1.0);
    CHECK_FALSE(all_equal(*m.policy, policy_before));
  }
}

TEST_CASE("GRPO: non-finite PPO loss is skipped, DIS rejects the same token; group checks") {
  auto grpo = LearnerConfig::preset(sao::algo::Algorithm::kGrpo);
  grpo.group_size = 2;
  grpo.actor_lr = 1e-3;
  auto build = [](CausalLM& policy) {
    auto batch = make_batch(policy, 13, 4);
    for (int i = 0; i < 4; ++i) {
      batch[i].group_id = i / 2;
      batch[i].rewards.assign(batch[i].size(), 0.0f);
    }
    batch[0].rewards[batch[0].size() - 1] = 0.0f;  // group 0: rewards 0 and 1
    batch[1].rewards[batch[1].size() - 1] = 1.0f;
    batch[2].rewards[batch[2].size() - 1] = 1.0f;  // group 1: equal rewards
    batch[3].rewards[batch[3].size() - 1] = 1.0f;
    // A token of the negative-advantage trajectory with an overflowing ratio.
    batch[0].behaviour_logprobs[batch[0].size() - 1] = -1e4f;
    return batch;
  };
  SUBCASE("PPO clip: loss is +inf -> skipped") {
    auto m = make_models(14);
    Learner learner(grpo, m.policy);
    auto before = snapshot(*m.policy);
    auto result = learner.step(build(m.policy));
    CHECK(result.skipped_nonfinite);
    CHECK(all_equal(*m.policy, before));
  }
  SUBCASE("DIS: the token is rejected, the step goes ahead") {
    auto m = make_models(14);
    auto config = grpo;
    config.policy_loss = sao::algo::PolicyLossKind::kDis;
    Learner learner(config, m.policy);
    auto result = learner.step(build(m.policy));
    CHECK_FALSE(result.skipped_nonfinite);
    CHECK(result.policy_updated);
    CHECK(result.metrics["dis_reject_high_frac"] > 0.0);
    // Equal-reward group 1 has zero advantage on every token; group 0 is +-1/sqrt(2).
    CHECK(result.advantages[2].abs().max().item<float>() == 0.0f);
    CHECK(result.advantages[3].abs().max().item<float>() == 0.0f);
    CHECK(result.advantages[1].max().item<float>() == doctest::Approx(0.5 / (std::sqrt(0.5) + 1e-6)));
  }
  SUBCASE("a group of the wrong size is an error") {
    auto m = make_models(14);
    Learner learner(grpo, m.policy);
    auto batch = build(m.policy);
    batch.pop_back();
    CHECK(throws_with([&] { learner.step(batch); }, "GRPO group 1 has 1 trajectories"));
  }
}

TEST_CASE("PPO with critic and the running-mean ablation run a step") {
  auto m = make_models(15);
  auto ppo = LearnerConfig::preset(sao::algo::Algorithm::kPpo);
  ppo.actor_lr = 1e-3;
  Learner learner(ppo, m.policy, m.critic);
  auto result = learner.step(make_batch(m.policy, 16));
  CHECK(result.policy_updated);
  CHECK(result.critic_updates == 1);
  CHECK(result.metrics.count("ppo_clip_low_frac") == 1);
  CHECK(result.metrics.count("dis_reject_low_frac") == 0);

  auto m2 = make_models(15);
  auto running = sao_config();
  running.baseline = sao::algo::BaselineKind::kRunningMean;
  Learner ablation(running, m2.policy);
  auto batch = make_batch(m2.policy, 17);
  auto first = ablation.step(batch);
  CHECK(first.metrics["baseline_mean"] == 0.0);
  double mean = 0.0;
  for (const auto& tr : batch) mean += tr.total_reward() / static_cast<double>(batch.size());
  CHECK(ablation.running_baseline().mean() == doctest::Approx(mean));
  // A_t = return - baseline on every action token (lambda = 1, gamma = 1).
  auto second = ablation.step(batch);
  CHECK(second.metrics["baseline_mean"] == doctest::Approx(mean));
  const auto& tr = batch[0];
  for (size_t t = 0; t < tr.size(); ++t) {
    if (tr.action_mask[t]) {
      CHECK(second.advantages[0][static_cast<int64_t>(t)].item<double>() ==
            doctest::Approx(tr.total_reward() - mean).epsilon(1e-5));
    }
  }
}

TEST_CASE("staleness is measured against the learner's policy version, never filtered here; future tokens refused") {
  auto m = make_models(18);
  Learner learner(sao_config(), m.policy, m.critic);
  CHECK(throws_with([&] { learner.step(make_batch(m.policy, 19, 2, /*version=*/5)); }, "newer than the learner's 0"));
  // A token the embedding cannot look up is refused by name, not by LibTorch's index error.
  auto outside = make_batch(m.policy, 19, 2);
  outside[1].tokens[3] = 16;
  CHECK_THROWS_WITH_AS(learner.step(outside),
                       "trajectory 1: token at position 3 is 16, outside the model's vocabulary of 16", sao::Error);
  outside[1].tokens[3] = -1;
  CHECK_THROWS_WITH_AS(learner.step(outside), "trajectory 1: negative token id -1 at position 3", sao::Error);
  CHECK(learner.steps() == 0);
  learner.step(make_batch(m.policy, 20));
  REQUIRE(learner.policy_version() == 1);
  // Staleness admission is replay's alone: a stale trajectory reaching the
  // learner is trained on and measured.
  auto mixed = make_batch(m.policy, 21, 3, /*version=*/1);
  auto stale = make_batch(m.policy, 22, 1, /*version=*/0);
  mixed.push_back(stale[0]);
  auto result = learner.step(mixed);
  CHECK(result.metrics["trajectories"] == 4.0);
  CHECK(result.metrics["staleness_max"] == 1.0);
  CHECK(result.metrics.count("dropped_stale") == 0);

  auto m2 = make_models(18);
  Learner lenient(sao_config(), m2.policy, m2.critic);
  lenient.step(make_batch(m2.policy, 20));
  auto old = lenient.step(make_batch(m2.policy, 23, 2, /*version=*/0));
  CHECK(old.metrics["staleness_mean"] == 1.0);
  CHECK(old.metrics["staleness_max"] == 1.0);
  CHECK(old.metrics["staleness_hist_1"] == old.metrics["action_tokens"]);
  CHECK(old.metrics["staleness_hist_0"] == 0.0);
}

TEST_CASE("log-prob agreement at lag 0: the rollout's log-probs are the learner's at the same weights") {
  int64_t action_tokens = 0;
  auto sampled = make_models(31);
  const auto batch = sample_batch(sampled.policy, /*version=*/0, 32, action_tokens);
  REQUIRE(action_tokens > 10);

  SUBCASE("same weights: agreement to float noise, nothing outside DIS's band") {
    Learner learner(sao_config(), sampled.policy, sampled.critic);
    auto m = learner.step(batch).metrics;
    CHECK(m["lag0_tokens"] == static_cast<double>(action_tokens));
    CHECK(m["lag0_tokens"] == m["action_tokens"]);
    CHECK(m["logprob_gap_lag0_max"] < 1e-5);
    CHECK(m["logprob_outside_dis_lag0_frac"] == 0.0);
    MESSAGE("logprob_gap_lag0_max " << m["logprob_gap_lag0_max"] << " over " << action_tokens << " tokens");
  }
  SUBCASE("one behaviour log-prob off by +0.5: gap 0.5, that token outside the band as DIS rejects it") {
    auto same = make_models(31);  // the weights that sampled the batch (the step above moved `sampled`)
    Learner learner(sao_config(), same.policy, same.critic);
    auto perturbed = batch;
    perturb_first_action(perturbed[2], 0.5f);
    auto m = learner.step(perturbed).metrics;
    CHECK(m["lag0_tokens"] == static_cast<double>(action_tokens));
    CHECK(std::abs(m["logprob_gap_lag0_max"] - 0.5) < 1e-5);
    // ratio exp(-0.5) = 0.61 <= 1 - eps_low = 0.7: rejected on the low side.
    CHECK(m["logprob_outside_dis_lag0_frac"] == 1.0 / static_cast<double>(action_tokens));
    CHECK(m["dis_reject_low_frac"] == m["logprob_outside_dis_lag0_frac"]);
    CHECK(m["dis_reject_high_frac"] == 0.0);
  }
  SUBCASE("a PPO learner measures against DIS's band too") {
    auto same = make_models(31);
    auto config = sao_config();
    config.policy_loss = sao::algo::PolicyLossKind::kPpo;
    Learner learner(config, same.policy, same.critic);
    auto perturbed = batch;
    perturb_first_action(perturbed[0], -2.0f);  // ratio e^2 = 7.4 >= 1 + eps_high = 6
    auto m = learner.step(perturbed).metrics;
    CHECK(std::abs(m["logprob_gap_lag0_max"] - 2.0) < 1e-5);
    CHECK(m["logprob_outside_dis_lag0_frac"] == 1.0 / static_cast<double>(action_tokens));
  }
  SUBCASE("during critic warm-up the policy's forward pass is measured as well") {
    auto same = make_models(31);
    auto config = sao_config();
    config.critic_warmup_steps = 1;
    Learner learner(config, same.policy, same.critic);
    auto m = learner.step(batch).metrics;
    CHECK(m["critic_only"] == 1.0);
    CHECK(m["lag0_tokens"] == static_cast<double>(action_tokens));
    CHECK(m["logprob_gap_lag0_max"] < 1e-5);
  }
}

TEST_CASE("log-prob agreement counts only tokens at staleness 0") {
  auto m = make_models(33);
  Learner learner(sao_config(), m.policy, m.critic);
  int64_t first_tokens = 0, fresh_tokens = 0, stale_tokens = 0;
  const auto first = sample_batch(m.policy, 0, 34, first_tokens);
  learner.step(first);
  REQUIRE(learner.policy_version() == 1);
  // Version-0 tokens, now at staleness 1, sampled by weights the learner no
  // longer holds, one of them also off by +0.5: none of that may show.
  auto stale = first;
  perturb_first_action(stale[1], 0.5f);
  stale_tokens = first_tokens;
  auto batch = sample_batch(m.policy, 1, 35, fresh_tokens);
  batch.insert(batch.end(), stale.begin(), stale.end());
  auto metrics = learner.step(batch).metrics;
  CHECK(metrics["action_tokens"] == static_cast<double>(fresh_tokens + stale_tokens));
  CHECK(metrics["staleness_hist_1"] == static_cast<double>(stale_tokens));
  CHECK(metrics["lag0_tokens"] == static_cast<double>(fresh_tokens));
  CHECK(metrics["logprob_gap_lag0_max"] < 1e-5);
  CHECK(metrics["logprob_outside_dis_lag0_frac"] == 0.0);

  // Only stale tokens: nothing to compare, so the two keys are absent.
  auto only_stale = learner.step(stale).metrics;
  CHECK(only_stale["staleness_hist_0"] == 0.0);
  CHECK(only_stale["lag0_tokens"] == 0.0);
  CHECK(only_stale.count("logprob_gap_lag0_max") == 0);
  CHECK(only_stale.count("logprob_outside_dis_lag0_frac") == 0);
}

TEST_CASE("save and load continue bit-identically") {
  for (bool running_mean : {false, true}) {
    CAPTURE(running_mean);
    auto config = sao_config();
    config.critic_warmup_steps = 1;  // both a critic-only and actor steps before the save
    if (running_mean) {
      config.baseline = sao::algo::BaselineKind::kRunningMean;
      config.running_mean_window = 5;
    }
    auto reference_models = make_models(30);
    std::vector<std::vector<Trajectory>> batches;
    for (int i = 0; i < 4; ++i) batches.push_back(make_batch(reference_models.policy, 40 + i, 3));
    auto critic_of = [&](Models& m) { return running_mean ? ValueModel{nullptr} : m.critic; };

    Learner straight(config, reference_models.policy, critic_of(reference_models));
    sao::algo::Metrics last_straight;
    for (const auto& batch : batches) last_straight = straight.step(batch).metrics;

    auto first_models = make_models(30);
    Learner first(config, first_models.policy, critic_of(first_models));
    first.step(batches[0]);
    first.step(batches[1]);
    const auto dir = temp_dir("resume");
    first.save(dir);

    auto fresh_models = make_models(999);  // different weights: everything must come from the checkpoint
    Learner resumed(config, fresh_models.policy, critic_of(fresh_models));
    resumed.load(dir);
    CHECK(resumed.steps() == 2);
    CHECK(resumed.policy_version() == (running_mean ? 2 : 1));  // warm-up applies to the critic only
    resumed.step(batches[2]);
    auto last_resumed = resumed.step(batches[3]).metrics;

    CHECK(modules_equal(*straight.policy(), *resumed.policy()));
    if (!running_mean) CHECK(modules_equal(*straight.critic(), *resumed.critic()));
    CHECK(straight.policy_version() == resumed.policy_version());
    CHECK(straight.steps() == resumed.steps());
    CHECK(last_straight["policy_loss"] == last_resumed["policy_loss"]);
    const auto& a = straight.running_baseline().values();
    const auto& b = resumed.running_baseline().values();
    CHECK(std::vector<double>(a.begin(), a.end()) == std::vector<double>(b.begin(), b.end()));
    fs::remove_all(dir);
  }
  auto m = make_models(1);
  Learner learner(sao_config(), m.policy, m.critic);
  CHECK(throws_with([&] { learner.load(temp_dir("missing")); }, "missing learner_state.json"));
}

namespace {

// n trajectories of 1 to 6 turns (2 action tokens, then a 2-token
// observation), so lengths run from 4 to 26 tokens: the mixed batch of a
// multi-turn task.
std::vector<Trajectory> make_mixed_length_batch(CausalLM& policy, uint64_t seed, int n) {
  std::mt19937_64 rng(seed);
  auto token = [&] { return static_cast<int64_t>(2 + rng() % 14); };
  std::vector<Trajectory> batch;
  for (int i = 0; i < n; ++i) {
    std::vector<sao::algo::Turn> turns(static_cast<size_t>(1 + i % 6));
    for (size_t k = 0; k < turns.size(); ++k) {
      auto& turn = turns[k];
      turn.action_tokens = {token(), token()};
      if (k + 1 < turns.size()) turn.observation = {token(), token()};
      turn.logprobs.assign(2, 0.0f);
      turn.versions.assign(2, 0);
    }
    auto tr = sao::algo::make_trajectory({1, token()}, turns, static_cast<double>(rng() % 2),
                                         /*terminated=*/i % 4 != 3, /*group_id=*/i);
    set_behaviour_logprobs(policy, tr, rng);
    batch.push_back(tr);
  }
  return batch;
}

std::vector<int64_t> rows_of(const std::vector<sao::algo::LengthBucket>& buckets) {
  std::vector<int64_t> rows;
  for (const auto& bucket : buckets) rows.insert(rows.end(), bucket.rows.begin(), bucket.rows.end());
  return rows;
}

}  // namespace

TEST_CASE("length buckets: the cheapest split of sorted lengths, every row once, ties keep fewer passes") {
  using sao::algo::plan_length_buckets;
  auto buckets = plan_length_buckets({3, 3, 3, 10, 10, 10}, 4, 0);
  REQUIRE(buckets.size() == 2);  // 9 + 30 positions instead of 60; a third group saves nothing
  CHECK(buckets[0].rows == std::vector<int64_t>{0, 1, 2});
  CHECK(buckets[0].width == 3);
  CHECK(buckets[1].rows == std::vector<int64_t>{3, 4, 5});
  CHECK(buckets[1].width == 10);
  // A split that saves 21 positions is not worth an overhead of 25.
  CHECK(plan_length_buckets({3, 3, 3, 10, 10, 10}, 4, 25).size() == 1);
  CHECK(plan_length_buckets({3, 3, 3, 10, 10, 10}, 4, 20).size() == 2);
  // Rows keep their identity whatever the batch order.
  buckets = plan_length_buckets({10, 3, 10, 3}, 4, 0);
  REQUIRE(buckets.size() == 2);
  CHECK(buckets[0].rows == std::vector<int64_t>{1, 3});
  CHECK(buckets[1].rows == std::vector<int64_t>{0, 2});
  buckets = plan_length_buckets({10, 3, 10, 3}, 1, 0);
  REQUIRE(buckets.size() == 1);
  CHECK(buckets[0].width == 10);
  CHECK(plan_length_buckets({7, 7, 7}, 4, 0).size() == 1);
  CHECK(plan_length_buckets({}, 4, 0).empty());
  CHECK(throws_with([] { plan_length_buckets({1}, 0, 0); }, "max_buckets must be >= 1, got 0"));

  std::mt19937_64 rng(5);
  std::vector<int64_t> lengths;
  for (int i = 0; i < 50; ++i) lengths.push_back(static_cast<int64_t>(2 + rng() % 60));
  buckets = plan_length_buckets(lengths, 4, 16);
  CHECK(buckets.size() == 4);
  auto rows = rows_of(buckets);
  std::sort(rows.begin(), rows.end());
  std::vector<int64_t> all(50);
  std::iota(all.begin(), all.end(), 0);
  CHECK(rows == all);
  int64_t positions = 0;
  for (size_t b = 0; b < buckets.size(); ++b) {
    int64_t longest = 0;
    for (const auto row : buckets[b].rows) longest = std::max(longest, lengths[static_cast<size_t>(row)]);
    CHECK(buckets[b].width == longest);
    if (b > 0) CHECK(buckets[b - 1].width < buckets[b].width);
    positions += static_cast<int64_t>(buckets[b].rows.size()) * buckets[b].width;
  }
  CHECK(positions + 16 * 3 < 50 * *std::max_element(lengths.begin(), lengths.end()));
}

TEST_CASE("bucketed forward passes give the padded batch's outputs and gradients at every real token") {
  auto m = make_models(21);
  const auto batch = sao::algo::collate(make_mixed_length_batch(m.policy, 22, 12), 0);
  const auto lengths = batch.lengths.to(torch::kInt64).contiguous();
  const std::vector<int64_t> lengths_vector(lengths.data_ptr<int64_t>(), lengths.data_ptr<int64_t>() + lengths.numel());
  const auto buckets = sao::algo::plan_length_buckets(lengths_vector, 4, 0);
  REQUIRE(buckets.size() == 4);
  const auto real = batch.action_mask;

  auto dense = sao::algo::policy_outputs(m.policy, batch.input_ids);
  auto loss = (dense.logprobs * real).sum();
  loss.backward();
  std::vector<torch::Tensor> dense_grads;
  for (auto& p : m.policy->parameters()) {
    dense_grads.push_back(p.grad().clone());
    p.mutable_grad().zero_();
  }
  auto bucketed = sao::algo::policy_outputs(m.policy, batch.input_ids, buckets);
  CHECK(bucketed.logprobs.sizes() == dense.logprobs.sizes());
  CHECK(torch::allclose(bucketed.logprobs * real, dense.logprobs.detach() * real, 1e-5, 1e-6));
  CHECK(torch::allclose(bucketed.entropy * real, dense.entropy * real, 1e-5, 1e-6));
  (bucketed.logprobs * real).sum().backward();
  auto params = m.policy->parameters();
  for (size_t i = 0; i < params.size(); ++i) CHECK(torch::allclose(params[i].grad(), dense_grads[i], 1e-4, 1e-6));

  torch::NoGradGuard no_grad;
  const auto dense_values = sao::algo::critic_outputs(m.critic, batch.input_ids, batch.lengths);
  const auto bucketed_values = sao::algo::critic_outputs(m.critic, batch.input_ids, batch.lengths, buckets);
  CHECK(torch::allclose(bucketed_values.values * real, dense_values.values * real, 1e-5, 1e-6));
  CHECK(torch::allclose(bucketed_values.bootstrap, dense_values.bootstrap, 1e-5, 1e-6));
  // One bucket at full width is the plain path, bit for bit.
  const std::vector<sao::algo::LengthBucket> whole{{rows_of(buckets), batch.input_ids.size(1)}};
  CHECK(torch::equal(sao::algo::critic_outputs(m.critic, batch.input_ids, batch.lengths, whole).values,
                     dense_values.values));
}

TEST_CASE("a learner step on mixed lengths: bucketed and padded give the same update") {
  auto a = make_models(31);
  auto b = make_models(31);
  REQUIRE(modules_equal(*a.policy, *b.policy));
  const auto trajectories = make_mixed_length_batch(a.policy, 32, 48);
  auto bucketed_config = sao_config();
  auto padded_config = sao_config();
  padded_config.max_length_buckets = 1;
  Learner bucketed(bucketed_config, a.policy, a.critic);
  Learner padded(padded_config, b.policy, b.critic);
  for (int step = 0; step < 2; ++step) {
    auto with = bucketed.step(trajectories);
    auto without = padded.step(trajectories);
    CHECK(with.metrics["length_buckets"] > 1);
    CHECK(without.metrics["length_buckets"] == 1);
    CHECK(with.metrics["policy_loss"] == doctest::Approx(without.metrics["policy_loss"]).epsilon(1e-4));
    CHECK(with.metrics["value_loss"] == doctest::Approx(without.metrics["value_loss"]).epsilon(1e-4));
    CHECK(torch::allclose(with.advantages, without.advantages, 1e-4, 1e-5));
  }
  auto pa = a.policy->parameters();
  auto pb = b.policy->parameters();
  for (size_t i = 0; i < pa.size(); ++i) CHECK(torch::allclose(pa[i], pb[i], 1e-4, 1e-5));
  auto ca = a.critic->parameters();
  auto cb = b.critic->parameters();
  for (size_t i = 0; i < ca.size(); ++i) CHECK(torch::allclose(ca[i], cb[i], 1e-4, 1e-5));
}

TEST_CASE("max_length_buckets is read and checked") {
  CHECK(config_from({{"max_length_buckets", 2}}).max_length_buckets == 2);
  CHECK(throws_with(
      [] {
        config_from({{"max_length_buckets", 0}});
      },
      "run.json: learner.max_length_buckets: must be an integer in [1, 16], got 0"));
}
