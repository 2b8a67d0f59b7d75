// Data-parallel learner ranks: the split of a batch over ranks and into
// micro-batches, the step protocol's bytes, and parity: two real Gloo ranks
// (threads of this process, talking over TCP through c10d) end a run of SAO
// steps with the weights and AdamW moments one rank gets on the whole batch;
// micro-batches likewise; an N=2 checkpoint resumes on one rank; a rank that
// leaves or drifts fails the step with a message that says so.
#include "algo/adamw_state.hpp"
#include "algo/learner.hpp"
#include "algo/learner_ranks.hpp"
#include "algo/rank_group.hpp"
#include "algo/step_plan.hpp"
#include "base/error.hpp"
#include "model/lora.hpp"
#include "model/model_config.hpp"
#include "model/transformer.hpp"
#include "test_tiny_model.hpp"

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <unistd.h>

#include <exception>
#include <filesystem>
#include <functional>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
using sao::algo::Learner;
using sao::algo::LearnerConfig;
using sao::algo::Trajectory;

namespace {

// When enabled, every learner here gets these LoRA adapters on its policy.
sao::model::LoraConfig g_lora;

auto make_models(uint64_t seed, bool critic) {
  auto models = sao_test::tiny_learner_models(seed, critic);
  if (g_lora.enabled()) {
    models.policy->attach_lora(g_lora);
    sao::model::init_lora(models.policy, seed);
  }
  return models;
}

// n single-turn trajectories of 3..9 tokens (so rows differ in length),
// reward 0/1, behaviour log-probs near the policy's own.
std::vector<Trajectory> make_batch(sao::model::CausalLM& policy, uint64_t seed, int n) {
  std::mt19937_64 rng(seed);
  std::vector<Trajectory> batch;
  for (int i = 0; i < n; ++i) {
    sao::algo::Turn turn;
    const int actions = 1 + static_cast<int>(rng() % 7);
    for (int k = 0; k < actions; ++k) turn.action_tokens.push_back(static_cast<int64_t>(2 + rng() % 14));
    turn.logprobs.assign(turn.action_tokens.size(), 0.0f);
    turn.versions.assign(turn.action_tokens.size(), 0);
    auto tr = sao::algo::make_trajectory({1, static_cast<int64_t>(2 + rng() % 14)}, {turn},
                                         static_cast<double>(rng() % 2), /*terminated=*/i % 3 != 2, i);
    torch::NoGradGuard no_grad;
    const auto logp = sao::algo::policy_outputs(policy, torch::tensor(tr.tokens).unsqueeze(0)).logprobs[0];
    for (size_t t = 0; t < tr.size(); ++t) {
      if (!tr.action_mask[t]) continue;
      const double noise = 0.2 * (static_cast<double>(rng() % 1000) / 1000.0 - 0.5);
      tr.behaviour_logprobs[t] = static_cast<float>(logp[static_cast<int64_t>(t)].item<double>() + noise);
    }
    batch.push_back(tr);
  }
  return batch;
}

LearnerConfig sao_config() {
  LearnerConfig config;
  config.actor_lr = 1e-3;
  config.critic_lr = 5e-3;
  config.critic_warmup_steps = 1;  // one critic-only step, then both
  config.rank_check_every = 1;
  return config;
}

LearnerConfig running_mean_config() {
  auto config = sao_config();
  config.baseline = sao::algo::BaselineKind::kRunningMean;
  config.normalize_advantages = true;
  config.max_length_buckets = 2;
  return config;
}

std::vector<std::vector<Trajectory>> make_batches(const LearnerConfig& config, int steps, int rows) {
  auto models = make_models(11, config.uses_critic());
  std::vector<std::vector<Trajectory>> batches;
  for (int s = 0; s < steps; ++s) batches.push_back(make_batch(models.policy, 100 + static_cast<uint64_t>(s), rows));
  return batches;
}

// The relative error of b against a, ||a - b|| / ||a|| (L2, in float64),
// of the tensor where it is largest.
double relative_difference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto x = a[i].to(torch::kFloat64), y = b[i].to(torch::kFloat64);
    const double scale = std::max(x.norm().item<double>(), 1e-300);
    worst = std::max(worst, (x - y).norm().item<double>() / scale);
  }
  return worst;
}

// Parameters and, after them, both AdamW moments of every parameter with state.
struct LearnerTensors {
  std::vector<torch::Tensor> weights;
  std::vector<torch::Tensor> moments;
};
LearnerTensors tensors_of(Learner& learner) {
  LearnerTensors out;
  auto add = [&](torch::nn::Module& module, torch::optim::AdamW* optimizer) {
    for (const auto& p : module.parameters()) {
      out.weights.push_back(p.detach().clone());
      if (optimizer == nullptr || !p.requires_grad()) continue;
      if (const auto* state = sao::algo::adamw_state(*optimizer, p)) {
        out.moments.push_back(state->exp_avg().clone());
        out.moments.push_back(state->exp_avg_sq().clone());
      }
    }
  };
  add(*learner.policy(), &learner.actor_optimizer());
  if (!learner.critic().is_empty()) add(*learner.critic(), learner.critic_optimizer());
  return out;
}

LearnerTensors tensors_of_initial(const LearnerConfig& config) {
  auto models = make_models(11, config.uses_critic());
  Learner learner(config, models.policy, models.critic);
  return tensors_of(learner);
}

LearnerTensors run_one_rank(const LearnerConfig& config, const std::vector<std::vector<Trajectory>>& batches,
                            std::vector<sao::algo::Metrics>* metrics = nullptr) {
  auto models = make_models(11, config.uses_critic());
  Learner learner(config, models.policy, models.critic);
  for (const auto& batch : batches) {
    auto result = learner.step(batch);
    if (metrics != nullptr) metrics->push_back(result.metrics);
  }
  return tensors_of(learner);
}

// Two ranks in two threads. Rank 0 builds from seed 11 (as run_one_rank),
// rank 1 from another seed: share_state must make them equal. `lead` runs
// on rank 0 with its leader; `before_following` on rank 1 after the share.
struct TwoRanks {
  LearnerTensors rank0, rank1;
  std::string rank0_error, rank1_error;
  int64_t rank1_steps = -1;
};
TwoRanks run_two_ranks(const LearnerConfig& config, const std::function<void(sao::algo::RankLeader&)>& lead,
                       const std::function<void(Learner&)>& before_following = {}) {
  TwoRanks out;
  std::promise<uint16_t> port;
  auto port_ready = port.get_future();
  auto options = [&](int rank) {
    sao::algo::RankGroupOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.rank = rank;
    o.size = 2;
    // A bound on failure only: every case here ends on events (a step's
    // collectives, a closed connection), never by waiting this long.
    o.timeout = std::chrono::seconds(120);
    return o;
  };
  std::thread follower([&] {
    try {
      auto o = options(1);
      o.port = port_ready.get();
      auto group = sao::algo::join_gloo_group(o);
      auto models = make_models(99, config.uses_critic());
      Learner learner(config, models.policy, models.critic, group);
      learner.share_state(0);
      if (before_following) before_following(learner);
      out.rank1_steps = sao::algo::follow_leader(learner);
      out.rank1 = tensors_of(learner);
    } catch (const std::exception& error) {
      out.rank1_error = error.what();
    }
  });
  try {
    auto o = options(0);
    o.on_listening = [&](uint16_t p) { port.set_value(p); };
    auto group = sao::algo::join_gloo_group(o);
    auto models = make_models(11, config.uses_critic());
    Learner learner(config, models.policy, models.critic, group);
    sao::algo::RankLeader leader(learner);
    learner.share_state(0);
    lead(leader);
    leader.stop();
    out.rank0 = tensors_of(learner);
  } catch (const std::exception& error) {
    out.rank0_error = error.what();
  }
  follower.join();
  return out;
}

std::string temp_dir(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("sao_ranks_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir.string();
}

}  // namespace

TEST_CASE("plan_rank_shares balances tokens, longest rows first, the same on every rank") {
  // Lengths 9, 7, 5, 4, 3, 2 -> rank 0: 9, 4, 2 (15 tokens); rank 1: 7, 5, 3 (15).
  const std::vector<int64_t> lengths = {4, 9, 2, 7, 3, 5};
  const auto shares = sao::algo::plan_rank_shares(lengths, 2);
  REQUIRE(shares.size() == 2);
  CHECK(shares[0] == std::vector<int64_t>{0, 1, 2});
  CHECK(shares[1] == std::vector<int64_t>{3, 4, 5});
  // Three ranks: 9 | 7 | 5; 4 -> rank 2 (9); 3 -> rank 1 (10); 2 -> rank 0 or
  // 2 (both 9): the lower rank.
  const auto three = sao::algo::plan_rank_shares(lengths, 3);
  CHECK(three[0] == std::vector<int64_t>{1, 2});
  CHECK(three[1] == std::vector<int64_t>{3, 4});
  CHECK(three[2] == std::vector<int64_t>{0, 5});
  CHECK_THROWS_WITH_AS(sao::algo::plan_rank_shares(lengths, 0), "plan_rank_shares: ranks must be >= 1, got 0",
                       sao::Error);
}

TEST_CASE("plan_step: a rank's share in micro-batches of at most N padded tokens") {
  const std::vector<int64_t> lengths = {4, 9, 2, 7, 3, 5};
  // One rank, 10 padded tokens a micro-batch, rows by length: 2,3 (2 x 3 = 6;
  // with 4: 3 x 4 = 12 > 10) | 4,5 (2 x 5 = 10) | 7 | 9.
  const auto plan = sao::algo::plan_step(lengths, 0, 1, 10, 4);
  CHECK(plan.share == std::vector<int64_t>{0, 1, 2, 3, 4, 5});
  CHECK(plan.share_tokens == 30);
  REQUIRE(plan.pieces.size() == 4);
  CHECK(plan.pieces[0].rows == std::vector<int64_t>{2, 4});
  CHECK(plan.pieces[1].rows == std::vector<int64_t>{0, 5});
  CHECK(plan.pieces[1].padded_tokens == 10);  // one bucket: a split saves 1 token, less than a pass costs
  CHECK(plan.pieces[2].rows == std::vector<int64_t>{3});
  CHECK(plan.pieces[3].rows == std::vector<int64_t>{1});
  // Off: one piece, bucketed as plan_length_buckets would.
  const auto whole = sao::algo::plan_step(lengths, 0, 1, 0, 4);
  REQUIRE(whole.pieces.size() == 1);
  CHECK(whole.pieces[0].rows.size() == 6);
  // Rank 1 of 2: rows 3, 4, 5 (lengths 7, 3, 5), indices into the share.
  const auto second = sao::algo::plan_step(lengths, 1, 2, 0, 4);
  CHECK(second.share == std::vector<int64_t>{3, 4, 5});
  CHECK(second.share_tokens == 15);
  CHECK_THROWS_WITH_AS(
      sao::algo::plan_step({5}, 0, 2, 0, 4),
      "learner: a batch of 1 trajectories cannot be split over 2 learner ranks (each needs one at least)", sao::Error);
}

TEST_CASE("step messages: trajectories survive the bytes; a cut message is refused by name") {
  auto models = make_models(3, false);
  auto batch = make_batch(models.policy, 5, 3);
  batch[1].truncated = true;
  batch[1].terminated = false;
  batch[2].accuracy = 0.25;
  const auto bytes = sao::algo::encode_trajectories(batch);
  const auto back = sao::algo::decode_trajectories(bytes);
  REQUIRE(back.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(back[i].tokens == batch[i].tokens);
    CHECK(back[i].action_mask == batch[i].action_mask);
    CHECK(back[i].behaviour_logprobs == batch[i].behaviour_logprobs);
    CHECK(back[i].policy_versions == batch[i].policy_versions);
    CHECK(back[i].rewards == batch[i].rewards);
    CHECK(back[i].terminated == batch[i].terminated);
    CHECK(back[i].truncated == batch[i].truncated);
    CHECK(back[i].group_id == batch[i].group_id);
  }
  CHECK(back[2].accuracy == 0.25);
  auto cut = bytes;
  cut.resize(bytes.size() - 3);
  CHECK_THROWS_WITH_AS(sao::algo::decode_trajectories(cut), doctest::Contains("step message truncated at byte"),
                       sao::Error);
  auto longer = bytes;
  longer.push_back(0);
  CHECK_THROWS_WITH_AS(sao::algo::decode_trajectories(longer),
                       "learner ranks: step message has bytes after its last trajectory", sao::Error);
  std::vector<uint8_t> huge(12, 0xff);
  huge[0] = 0x53, huge[1] = 0x4f, huge[2] = 0x41, huge[3] = 0x54;
  CHECK_THROWS_WITH_AS(sao::algo::decode_trajectories(huge), doctest::Contains("claims"), sao::Error);
}

TEST_CASE("micro-batches: the same step as one pass over the batch") {
  for (const auto& config : {sao_config(), running_mean_config()}) {
    const auto batches = make_batches(config, 4, 6);
    const auto whole = run_one_rank(config, batches);
    auto micro = config;
    micro.micro_batch_tokens = 12;  // two or three rows a piece
    std::vector<sao::algo::Metrics> metrics;
    const auto pieces = run_one_rank(micro, batches, &metrics);
    CHECK(metrics.back().at("micro_batches") >= 3.0);
    CHECK(relative_difference(whole.weights, pieces.weights) < 1e-5);
    CHECK(relative_difference(whole.moments, pieces.moments) < 1e-5);
  }
}

TEST_CASE("2 Gloo ranks end with the weights and AdamW moments of 1 rank on the whole batch") {
  for (const auto& base : {sao_config(), running_mean_config()}) {
    for (const int64_t micro_batch_tokens : {int64_t{0}, int64_t{12}}) {
      auto config = base;
      config.micro_batch_tokens = micro_batch_tokens;
      const auto batches = make_batches(config, 5, 6);
      std::vector<sao::algo::Metrics> one_metrics, two_metrics;
      const auto one = run_one_rank(config, batches, &one_metrics);
      const auto two = run_two_ranks(config, [&](sao::algo::RankLeader& leader) {
        for (const auto& batch : batches) two_metrics.push_back(leader.step(batch).metrics);
      });
      REQUIRE(two.rank0_error == "");
      REQUIRE(two.rank1_error == "");
      CHECK(two.rank1_steps == 5);
      CHECK(relative_difference(one.weights, two.rank0.weights) < 1e-5);
      CHECK(relative_difference(one.moments, two.rank0.moments) < 1e-5);
      // ... and the steps moved the weights far more than that.
      CHECK(relative_difference(tensors_of_initial(config).weights, one.weights) > 1e-3);
      // Rank 1 holds the same learner, bit for bit (it was checked every step too).
      CHECK(relative_difference(two.rank0.weights, two.rank1.weights) == 0.0);
      CHECK(relative_difference(two.rank0.moments, two.rank1.moments) == 0.0);
      // The numbers reported are the whole batch's.
      for (const char* key : {"reward_mean", "policy_loss", "entropy", "ratio_mean", "tokens", "action_tokens"}) {
        CHECK(two_metrics.back().at(key) == doctest::Approx(one_metrics.back().at(key)).epsilon(1e-5));
      }
      CHECK(two_metrics.back().at("rank0_tokens") + two_metrics.back().at("rank1_tokens") ==
            one_metrics.back().at("tokens"));
      CHECK(two_metrics.back().count("allreduce_s") == 1);
    }
  }
}

TEST_CASE("LoRA: 2 Gloo ranks end with the adapters and AdamW moments of 1 rank; the base stays where it was") {
  struct ResetLora {  // even when a check below ends the case: later cases run without adapters
    ~ResetLora() { g_lora = sao::model::LoraConfig{}; }
  } reset_lora;
  g_lora.rank = 2;
  g_lora.alpha = 4.0;
  g_lora.targets = {"q_proj", "v_proj", "down_proj"};
  // Replicated and ZeRO-1 with an fp32 base; replicated with a base kept in
  // bf16 (learner.lora_base_dtype: its bits are shared as bytes, Gloo has no bf16).
  for (const auto& [shard, base_dtype] :
       {std::pair{false, "fp32"}, std::pair{true, "fp32"}, std::pair{false, "bf16"}}) {
    CAPTURE(shard);
    CAPTURE(base_dtype);
    auto config = sao_config();
    config.shard_optimizer = shard;
    config.lora_base_dtype = base_dtype;
    const auto batches = make_batches(config, 5, 6);
    const auto one = run_one_rank(config, batches);
    const auto two = run_two_ranks(config, [&](sao::algo::RankLeader& leader) {
      for (const auto& batch : batches) leader.step(batch);
    });
    REQUIRE(two.rank0_error == "");
    REQUIRE(two.rank1_error == "");
    CHECK(relative_difference(one.weights, two.rank0.weights) < 1e-5);
    // (Sharded, each rank holds its share of the moments; the weights say the updates were the same.)
    if (!shard) CHECK(relative_difference(one.moments, two.rank0.moments) < 1e-5);
    CHECK(relative_difference(two.rank0.weights, two.rank1.weights) == 0.0);
    // Moments for the adapters and the critic only: 2 per adapter tensor (3
    // targets, A and B) and 2 per trained critic tensor.
    auto models = make_models(11, true);
    Learner learner(config, models.policy, models.critic);  // applies the critic's frozen groups
    int64_t critic_tensors = 0;
    for (const auto& p : models.critic->parameters()) critic_tensors += p.requires_grad() ? 1 : 0;
    CHECK(static_cast<int64_t>(one.moments.size()) == 2 * (3 * 2 + critic_tensors));
  }
}

TEST_CASE("an N=2 checkpoint resumes on one rank and continues as an uninterrupted run") {
  const auto config = sao_config();
  const auto batches = make_batches(config, 5, 6);
  const auto uninterrupted = run_one_rank(config, batches);
  const auto dir = temp_dir("resume");
  const auto two = run_two_ranks(config, [&](sao::algo::RankLeader& leader) {
    for (size_t s = 0; s < 3; ++s) leader.step(batches[s]);
    leader.save(dir);
  });
  REQUIRE(two.rank0_error == "");
  auto models = make_models(42, true);
  Learner resumed(config, models.policy, models.critic);
  resumed.load(dir);
  CHECK(resumed.steps() == 3);
  for (size_t s = 3; s < 5; ++s) resumed.step(batches[s]);
  const auto after = tensors_of(resumed);
  CHECK(relative_difference(uninterrupted.weights, after.weights) < 1e-5);
  CHECK(relative_difference(uninterrupted.moments, after.moments) < 1e-5);
  fs::remove_all(dir);
}

TEST_CASE("live learning rates reach every rank") {
  const auto config = sao_config();
  const auto batches = make_batches(config, 3, 4);
  auto models = make_models(11, true);
  Learner reference(config, models.policy, models.critic);
  reference.step(batches[0]);
  reference.set_actor_lr(3e-3);
  reference.set_critic_lr(2e-3);
  for (size_t s = 1; s < 3; ++s) reference.step(batches[s]);
  const auto expected = tensors_of(reference);
  const auto two = run_two_ranks(config, [&](sao::algo::RankLeader& leader) {
    leader.step(batches[0]);
    leader.set_actor_lr(3e-3);
    leader.set_critic_lr(2e-3);
    CHECK_THROWS_WITH_AS(leader.set_actor_lr(-1.0), "learner: actor_lr must be a positive number", sao::Error);
    for (size_t s = 1; s < 3; ++s) leader.step(batches[s]);
  });
  REQUIRE(two.rank0_error == "");
  REQUIRE(two.rank1_error == "");
  CHECK(relative_difference(expected.weights, two.rank1.weights) < 1e-5);
}

TEST_CASE("ranks that drift apart stop the run with a message that names them") {
  const auto config = sao_config();
  const auto batches = make_batches(config, 1, 4);
  const auto two = run_two_ranks(
      config, [&](sao::algo::RankLeader& leader) { leader.step(batches[0]); },
      [](Learner& learner) {
        torch::NoGradGuard no_grad;
        learner.policy()->parameters().front().add_(1e-3);
      });
  CHECK(two.rank0_error.find("learner ranks diverged at step 1: the weights and moments of rank(s) 1 differ from "
                             "rank 0's") != std::string::npos);
  CHECK(two.rank1_error.find("learner ranks diverged at step 1") != std::string::npos);
}

TEST_CASE("a rank that leaves fails rank 0's next step with a RankFailure, not a hang") {
  const auto config = sao_config();
  const auto batches = make_batches(config, 1, 4);
  std::string caught;
  const auto two = run_two_ranks(
      config,
      [&](sao::algo::RankLeader& leader) {
        try {
          leader.step(batches[0]);
        } catch (const sao::algo::RankFailure& failure) {
          caught = failure.what();
        }
      },
      [](Learner&) { throw std::runtime_error("rank 1 leaves"); });
  CHECK(two.rank1_error == "rank 1 leaves");
  CHECK(caught.find("learner ranks: rank 0:") == 0);
  CHECK(caught.find("failed (a rank died, left or took longer than 120 s)") != std::string::npos);
}

TEST_CASE("a group that never forms is a RankFailure naming the address") {
  sao::algo::RankGroupOptions options;
  options.port = 1;  // nothing listens there; connecting is refused at once
  options.rank = 1;
  options.size = 2;
  options.timeout = std::chrono::seconds(2);
  CHECK_THROWS_WITH_AS(
      sao::algo::join_gloo_group(options),
      doctest::Contains("learner ranks: rank 1 of 2 at 127.0.0.1:1: the ranks did not meet within 2 s"),
      sao::algo::RankFailure);
  options.rank = 2;
  CHECK_THROWS_WITH_AS(sao::algo::join_gloo_group(options), "learner ranks: rank 2 is not in a group of 2", sao::Error);
}

TEST_CASE("a follower process's path: setup from rank 0, random weights replaced, parity with one rank") {
  auto config = sao_config();
  config.micro_batch_tokens = 16;
  const auto batches = make_batches(config, 4, 5);
  const auto one = run_one_rank(config, batches);
  std::promise<uint16_t> port;
  auto port_ready = port.get_future();
  int64_t follower_steps = -1;
  std::string follower_error;
  std::thread follower([&] {
    try {
      sao::algo::RankGroupOptions options;
      options.port = port_ready.get();
      options.rank = 1;
      options.size = 2;
      options.timeout = std::chrono::seconds(120);
      follower_steps = sao::algo::serve_learner_rank(options);
    } catch (const std::exception& error) {
      follower_error = error.what();
    }
  });
  sao::algo::RankGroupOptions options;
  options.port = 0;
  options.size = 2;
  options.timeout = std::chrono::seconds(120);
  options.on_listening = [&](uint16_t p) { port.set_value(p); };
  auto group = sao::algo::join_gloo_group(options);
  auto models = make_models(11, true);
  sao::algo::send_rank_setup(*group, {{"model", sao::model::model_config_settings_to_json(models.policy->config())},
                                      {"learner", config.to_json()}});
  Learner learner(config, models.policy, models.critic, group);
  sao::algo::RankLeader leader(learner);
  leader.share_state();
  for (const auto& batch : batches) leader.step(batch);
  const auto after_four = tensors_of(learner);
  CHECK(relative_difference(one.weights, after_four.weights) < 1e-5);
  CHECK(relative_difference(one.moments, after_four.moments) < 1e-5);
  // A malformed batch is refused on both ranks alike, and they go on together.
  auto bad = batches[0];
  bad[0].action_mask[0] = 1;
  CHECK_THROWS_WITH_AS(leader.step(bad), doctest::Contains("trajectory 0"), sao::Error);
  leader.step(batches[0]);
  leader.stop();
  follower.join();
  // rank_check_every 1: rank 1 matched rank 0 bit for bit after every step.
  CHECK(follower_error == "");
  CHECK(follower_steps == 5);
  CHECK(learner.steps() == 5);
}

TEST_CASE("a follower refuses rank 0 and a setup it cannot build, by name") {
  sao::algo::RankGroupOptions options;
  CHECK_THROWS_WITH_AS(sao::algo::serve_learner_rank(options),
                       "learner ranks: rank 0 is the run's learner (sao train / sao node --role learner)", sao::Error);
}

TEST_CASE("plan_parameter_owners: largest first to the lightest rank") {
  // 100 -> 0; 60 -> 1; 50 -> 1 (110); 30 -> 0 (130)... ties to the lower rank.
  CHECK(sao::algo::plan_parameter_owners({30, 100, 50, 60}, 2) == std::vector<int>{0, 0, 1, 1});
  CHECK(sao::algo::plan_parameter_owners({5, 5, 5}, 1) == std::vector<int>{0, 0, 0});
}

TEST_CASE("ZeRO-1: sharded AdamW gives the replicated updates, holds about half the moments, checkpoints whole") {
  auto config = sao_config();
  config.shard_optimizer = true;
  const auto batches = make_batches(config, 5, 6);
  auto replicated = config;
  replicated.shard_optimizer = false;
  const auto one = run_one_rank(replicated, batches);
  const auto dir = temp_dir("zero1");
  int64_t sharded_bytes = 0;
  const auto two = run_two_ranks(config, [&](sao::algo::RankLeader& leader) {
    for (const auto& batch : batches) leader.step(batch);
    sharded_bytes = leader.learner().optimizer_state_bytes();
    leader.save(dir);  // gathers rank 1's shards into one complete state
  });
  REQUIRE(two.rank0_error == "");
  REQUIRE(two.rank1_error == "");
  CHECK(relative_difference(one.weights, two.rank0.weights) < 1e-5);
  CHECK(relative_difference(two.rank0.weights, two.rank1.weights) == 0.0);
  // Each rank holds its own moments only.
  auto models = make_models(11, true);
  Learner reference(replicated, models.policy, models.critic);
  for (size_t s = 0; s < 2; ++s) reference.step(batches[s]);  // past the critic-only step: both models have moments
  const int64_t replicated_bytes = reference.optimizer_state_bytes();
  CHECK(static_cast<double>(sharded_bytes) / static_cast<double>(replicated_bytes) <= 0.55);
  CHECK(two.rank0.moments.size() + two.rank1.moments.size() == one.moments.size());
  // The gathered checkpoint is the replicated learner's state, moments included.
  auto fresh = make_models(5, true);
  Learner resumed(replicated, fresh.policy, fresh.critic);
  resumed.load(dir);
  const auto loaded = tensors_of(resumed);
  CHECK(relative_difference(one.weights, loaded.weights) < 1e-5);
  CHECK(relative_difference(one.moments, loaded.moments) < 1e-5);
  fs::remove_all(dir);
}

TEST_CASE("ZeRO-1: a one-rank checkpoint resumes on 2 sharded ranks and continues as one rank would") {
  auto replicated = sao_config();
  const auto batches = make_batches(replicated, 5, 6);
  const auto uninterrupted = run_one_rank(replicated, batches);
  const auto dir = temp_dir("zero1_resume");
  {
    auto models = make_models(11, true);
    Learner first(replicated, models.policy, models.critic);
    for (size_t s = 0; s < 3; ++s) first.step(batches[s]);
    first.save(dir);
  }
  auto sharded = replicated;
  sharded.shard_optimizer = true;
  const auto two = run_two_ranks(sharded, [&](sao::algo::RankLeader& leader) {
    leader.learner().load(dir);
    leader.share_state();  // rank 1 takes the weights and its shard of the moments
    for (size_t s = 3; s < 5; ++s) leader.step(batches[s]);
  });
  REQUIRE(two.rank0_error == "");
  REQUIRE(two.rank1_error == "");
  CHECK(relative_difference(uninterrupted.weights, two.rank0.weights) < 1e-5);
  CHECK(relative_difference(uninterrupted.weights, two.rank1.weights) < 1e-5);
  fs::remove_all(dir);
}
