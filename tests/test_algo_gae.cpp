// Trajectory collation and skip-observation GAE. Hand-computed values pin the
// Bellman chain over action tokens only (observation values must be ignored),
// terminated vs truncated, and the per-trajectory length-adaptive lambda; a
// plain-loop reference cross-checks random inputs.
#include "algo/gae.hpp"
#include "algo/trajectory.hpp"
#include "base/error.hpp"

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

using sao::algo::constant_lambda;
using sao::algo::length_adaptive_lambda;
using sao::algo::skip_observation_gae;

namespace {

torch::Tensor row(const std::vector<double>& values) {
  return torch::tensor(values, torch::kFloat64).unsqueeze(0);  // [1, T]
}

torch::Tensor mask_row(const std::vector<int>& flags) {
  std::vector<int64_t> v(flags.begin(), flags.end());
  return torch::tensor(v, torch::kInt64).to(torch::kBool).unsqueeze(0);
}

double value_at(const torch::Tensor& t, int64_t b, int64_t i) {
  return t[b][i].item<double>();
}

bool throws_with(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
  } catch (const sao::Error& e) {
    const std::string message = e.what();
    if (message.find(needle) == std::string::npos) {
      MESSAGE("message was: " << message);
      return false;
    }
    return true;
  }
  return false;
}

}  // namespace

TEST_CASE("make_trajectory lays out prompt, actions and observations; collate pads") {
  sao::algo::Turn first{{5, 6}, {-0.5f, -0.25f}, {3, 3}, 0.5, {9, 9}};
  sao::algo::Turn second{{7}, {-1.0f}, {4}, 0.0, {}};
  auto tr = sao::algo::make_trajectory({1, 2}, {first, second}, 1.0, /*terminated=*/true, /*group_id=*/42);
  CHECK(tr.tokens == std::vector<int64_t>{1, 2, 5, 6, 9, 9, 7});
  CHECK(tr.action_mask == std::vector<uint8_t>{0, 0, 1, 1, 0, 0, 1});
  CHECK(tr.rewards == std::vector<float>{0, 0, 0, 0.5f, 0, 0, 1.0f});  // per-turn and outcome reward
  CHECK(tr.policy_versions == std::vector<int64_t>{-1, -1, 3, 3, -1, -1, 4});
  CHECK(tr.num_action_tokens() == 3);
  CHECK(tr.total_reward() == doctest::Approx(1.5));
  CHECK(tr.oldest_version() == 3);

  sao::algo::Turn short_turn{{8}, {-0.1f}, {4}, 0.0, {}};
  auto other = sao::algo::make_trajectory({1}, {short_turn}, 0.0, /*terminated=*/false);
  auto batch = sao::algo::collate({tr, other}, /*pad_id=*/15);
  CHECK(batch.input_ids.sizes() == torch::IntArrayRef({2, 7}));
  CHECK(batch.input_ids[1][2].item<int64_t>() == 15);
  CHECK(batch.action_mask[1].to(torch::kInt64).sum().item<int64_t>() == 1);
  CHECK(batch.valid_mask[1].to(torch::kInt64).sum().item<int64_t>() == 2);
  CHECK(batch.lengths[0].item<int64_t>() == 7);
  CHECK(batch.num_actions[0].item<int64_t>() == 3);
  CHECK(batch.terminated[0].item<bool>());
  CHECK_FALSE(batch.terminated[1].item<bool>());
  CHECK(batch.versions[0][4].item<int64_t>() == -1);
  CHECK(batch.group_ids[0].item<int64_t>() == 42);
  CHECK(batch.behaviour_logprobs[0][3].item<float>() == -0.25f);
  CHECK(batch.returns[0].item<double>() == doctest::Approx(1.5));
}

TEST_CASE("trajectory validation names the problem") {
  auto good = sao::algo::make_trajectory({1}, {sao::algo::Turn{{5}, {-0.5f}, {0}, 0.0, {}}}, 1.0, true);
  auto bad = good;
  bad.rewards.push_back(0.0f);
  CHECK(throws_with([&] { bad.validate("trajectory 3"); }, "trajectory 3: rewards has 3 entries but tokens has 2"));
  bad = good;
  bad.rewards[0] = 1.0f;
  CHECK(throws_with([&] { bad.validate("t"); }, "on a non-action token at position 0"));
  bad = good;
  bad.action_mask[1] = 0;
  bad.rewards[1] = 0.0f;
  CHECK(throws_with([&] { bad.validate("t"); }, "no action token"));
  bad = good;
  bad.action_mask[0] = 1;
  CHECK(throws_with([&] { bad.validate("t"); }, "token 0 is an action"));
  bad = good;
  bad.truncated = true;
  CHECK(throws_with([&] { bad.validate("t"); }, "exactly one of terminated and truncated"));
  bad = good;
  bad.policy_versions[1] = -1;
  CHECK(throws_with([&] { bad.validate("t"); }, "negative policy version at position 1"));
  CHECK(throws_with([&] { sao::algo::collate({good, bad}); }, "trajectory 1:"));
}

TEST_CASE("GAE skips observation tokens: the value after an observation block is the next action's") {
  // tokens: P a1 a2 o1 o2 a3; observation values are garbage that must not be used.
  auto rewards = row({0, 0, 0.5, 0, 0, 1.0});
  auto values = row({7, 0.1, 0.2, 9, 9, 0.4});
  auto mask = mask_row({0, 1, 1, 0, 0, 1});
  const double gamma = 0.9, lambda = 0.5;
  SUBCASE("terminated: next value after the last action is 0") {
    auto out = skip_observation_gae(rewards, values, mask, torch::tensor({true}), torch::tensor({2.0}, torch::kFloat64),
                                    gamma, constant_lambda(1, lambda));
    // A5 = 1 - 0.4 = 0.6; A2 = 0.5 + 0.9*0.4 - 0.2 + 0.45*0.6 = 0.93; A1 = 0.9*0.2 - 0.1 + 0.45*0.93 = 0.4985
    CHECK(value_at(out.advantages, 0, 5) == doctest::Approx(0.6));
    CHECK(value_at(out.advantages, 0, 2) == doctest::Approx(0.93));
    CHECK(value_at(out.advantages, 0, 1) == doctest::Approx(0.4985));
    CHECK(value_at(out.returns, 0, 1) == doctest::Approx(0.5985));
    CHECK(value_at(out.returns, 0, 2) == doctest::Approx(1.13));
    CHECK(value_at(out.returns, 0, 5) == doctest::Approx(1.0));
    for (int64_t t : {0, 3, 4}) {
      CHECK(value_at(out.advantages, 0, t) == 0.0);
      CHECK(value_at(out.returns, 0, t) == 0.0);
    }
    CHECK((out.advantages.scalar_type() == torch::kFloat64));
  }
  SUBCASE("truncated: bootstrap from the final state's value") {
    auto out = skip_observation_gae(rewards, values, mask, torch::tensor({false}),
                                    torch::tensor({2.0}, torch::kFloat64), gamma, constant_lambda(1, lambda));
    // A5 = 1 + 0.9*2 - 0.4 = 2.4; A2 = 0.66 + 0.45*2.4 = 1.74; A1 = 0.08 + 0.45*1.74 = 0.863
    CHECK(value_at(out.advantages, 0, 5) == doctest::Approx(2.4));
    CHECK(value_at(out.advantages, 0, 2) == doctest::Approx(1.74));
    CHECK(value_at(out.advantages, 0, 1) == doctest::Approx(0.863));
  }
}

TEST_CASE("reward on a non-action token is rejected by GAE") {
  CHECK(throws_with(
      [] {
        skip_observation_gae(row({1, 0}), row({0, 0}), mask_row({0, 1}), torch::tensor({true}),
                             torch::zeros({1}, torch::kFloat64), 1.0, constant_lambda(1, 1.0));
      },
      "non-action token (row 0, position 0)"));
}

TEST_CASE("length-adaptive lambda is computed per trajectory") {
  // Row 0: 3 actions; row 1: 2 actions (padded); row 2: 1 action.
  auto mask = torch::tensor({0, 1, 1, 1, 0, 1, 1, 0, 0, 1, 0, 0}, torch::kInt64).view({3, 4}).to(torch::kBool);
  auto lambdas = length_adaptive_lambda(mask, 1.5);
  CHECK(lambdas[0].item<double>() == doctest::Approx(1.0 - 1.0 / 4.5));  // 0.7778
  CHECK(lambdas[1].item<double>() == doctest::Approx(1.0 - 1.0 / 3.0));
  CHECK(lambdas[2].item<double>() == doctest::Approx(1.0 - 1.0 / 1.5));
  CHECK(length_adaptive_lambda(mask, 0.05)[0].item<double>() == 0.0);  // clamped at 0
  CHECK(length_adaptive_lambda(torch::ones({1, 4000}, torch::kBool), 1.5)[0].item<double>() < 1.0);

  // GAE uses each row's own lambda: r = 1 on the last action, V = 0.5, gamma = 1.
  auto rewards =
      torch::tensor({0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0}, torch::kFloat64).view({3, 4});
  auto values = torch::full({3, 4}, 0.5, torch::kFloat64);
  auto out = skip_observation_gae(rewards, values, mask, torch::ones({3}, torch::kBool),
                                  torch::zeros({3}, torch::kFloat64), 1.0, lambdas);
  const double l0 = 7.0 / 9.0, l1 = 2.0 / 3.0;
  CHECK(value_at(out.advantages, 0, 3) == doctest::Approx(0.5));
  CHECK(value_at(out.advantages, 0, 2) == doctest::Approx(l0 * 0.5));
  CHECK(value_at(out.advantages, 0, 1) == doctest::Approx(l0 * l0 * 0.5));
  CHECK(value_at(out.advantages, 1, 2) == doctest::Approx(0.5));
  CHECK(value_at(out.advantages, 1, 1) == doctest::Approx(l1 * 0.5));
  CHECK(value_at(out.advantages, 1, 3) == 0.0);  // padding
  CHECK(value_at(out.advantages, 2, 1) == doctest::Approx(0.5));
}

TEST_CASE("GAE matches a plain-loop reference on random inputs (float64)") {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  const int64_t batch = 6, steps = 17;
  for (int trial = 0; trial < 5; ++trial) {
    std::vector<double> r(batch * steps, 0.0), v(batch * steps), boot(batch), lam(batch);
    std::vector<int> m(batch * steps, 0), done(batch);
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t t = 1; t < steps; ++t) m[b * steps + t] = (rng() % 3) != 0;
      m[b * steps + 1 + static_cast<int64_t>(rng() % (steps - 1))] = 1;  // at least one action
      for (int64_t t = 0; t < steps; ++t) {
        v[b * steps + t] = uniform(rng);
        if (m[b * steps + t] && rng() % 2) r[b * steps + t] = uniform(rng);
      }
      boot[b] = uniform(rng);
      lam[b] = 0.5 + 0.5 * uniform(rng);
      done[b] = static_cast<int>(rng() % 2);
    }
    const double gamma = 0.97;
    // Reference: list the action positions, then run the recurrence over that list.
    std::vector<double> expected_adv(batch * steps, 0.0), expected_ret(batch * steps, 0.0);
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<int64_t> positions;
      for (int64_t t = 0; t < steps; ++t) {
        if (m[b * steps + t]) positions.push_back(t);
      }
      double future_adv = 0.0;
      for (size_t k = positions.size(); k-- > 0;) {
        const int64_t p = positions[k];
        const double next_v = k + 1 < positions.size() ? v[b * steps + positions[k + 1]] : (done[b] ? 0.0 : boot[b]);
        const double delta = r[b * steps + p] + gamma * next_v - v[b * steps + p];
        future_adv = delta + gamma * lam[b] * future_adv;
        expected_adv[b * steps + p] = future_adv;
        expected_ret[b * steps + p] = future_adv + v[b * steps + p];
      }
    }
    std::vector<int64_t> m64(m.begin(), m.end());
    std::vector<int64_t> done64(done.begin(), done.end());
    const auto f64 = torch::kFloat64;
    auto out = skip_observation_gae(
        torch::tensor(r, f64).view({batch, steps}), torch::tensor(v, f64).view({batch, steps}),
        torch::tensor(m64).view({batch, steps}).to(torch::kBool), torch::tensor(done64).to(torch::kBool),
        torch::tensor(boot, f64), gamma, torch::tensor(lam, f64));
    auto adv = out.advantages.contiguous();
    auto ret = out.returns.contiguous();
    double worst = 0.0;
    for (int64_t i = 0; i < batch * steps; ++i) {
      worst = std::max(worst, std::abs(adv.view(-1)[i].item<double>() - expected_adv[i]));
      worst = std::max(worst, std::abs(ret.view(-1)[i].item<double>() - expected_ret[i]));
    }
    CHECK(worst < 1e-6);
  }
}
