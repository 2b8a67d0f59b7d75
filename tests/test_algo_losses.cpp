// Policy/value losses and critic-free baselines. The DIS tests pin the
// details that distinguish it from PPO: a strict band (a ratio exactly on
// the boundary is rejected), rejected tokens still count in the
// denominator, and no gradient outside the band whatever the advantage's
// sign, where PPO keeps the gradient on its unclipped side. A plain-loop
// reference cross-checks both losses and their gradients on random inputs.
#include "algo/losses.hpp"
#include "base/error.hpp"

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

using sao::algo::dis_loss;
using sao::algo::DisOptions;
using sao::algo::ppo_clip_loss;
using sao::algo::PpoClipOptions;

namespace {

const auto kF64 = torch::kFloat64;

torch::Tensor row(const std::vector<double>& values, bool requires_grad = false) {
  return torch::tensor(values, kF64).unsqueeze(0).requires_grad_(requires_grad);  // [1, T]
}

torch::Tensor mask_row(const std::vector<int>& flags) {
  std::vector<int64_t> v(flags.begin(), flags.end());
  return torch::tensor(v, torch::kInt64).to(torch::kBool).unsqueeze(0);
}

std::vector<double> gradient_of(const torch::Tensor& loss, const torch::Tensor& input) {
  auto grad = torch::autograd::grad({loss}, {input})[0].contiguous().view(-1);
  return std::vector<double>(grad.data_ptr<double>(), grad.data_ptr<double>() + grad.numel());
}

}  // namespace

TEST_CASE("DIS: strict band, rejected tokens count in N, hand-computed loss and gradient") {
  // Band (0.5, 2.0). Ratios: token1 exactly 0.5, token2 exactly 2.0 (both
  // rejected), token3 1.0, token4 1.5 (trusted).
  CHECK(std::exp(std::log(0.5)) == 0.5);
  CHECK(std::exp(std::log(2.0)) == 2.0);
  auto logp = row({0.0, std::log(0.5), 0.0, -0.5, -1.2}, true);
  auto behaviour = row({0.0, 0.0, -std::log(2.0), -0.5, -1.2 - std::log(1.5)});
  auto adv = row({0.0, 1.0, -1.0, 2.0, -0.5});
  auto mask = mask_row({0, 1, 1, 1, 1});
  auto out = dis_loss(logp, behaviour, adv, mask, DisOptions{0.5, 1.0, true});
  // loss = -(1 * 2 * -0.5 + 1.5 * -0.5 * -1.2) / 4 = 0.025 (over 2 trusted tokens it would be 0.05)
  CHECK(out.loss.item<double>() == doctest::Approx(0.025));
  CHECK(out.tokens == 4);
  CHECK(out.below_frac == 0.25);
  CHECK(out.above_frac == 0.25);
  CHECK(out.ratio_mean == doctest::Approx(1.25));
  CHECK(out.ratio_max == doctest::Approx(2.0));
  auto grad = gradient_of(out.loss, logp);  // -w A / N on trusted tokens
  CHECK(grad[0] == 0.0);
  CHECK(grad[1] == 0.0);
  CHECK(grad[2] == 0.0);
  CHECK(grad[3] == doctest::Approx(-0.5));
  CHECK(grad[4] == doctest::Approx(0.1875));
}

TEST_CASE("DIS: a ratio just inside the band is trusted, exactly on it is not") {
  auto mask = mask_row({0, 1});
  auto adv = row({0.0, 1.0});
  auto just_inside = dis_loss(row({0.0, std::log(0.5) + 1e-12}, true), row({0.0, 0.0}), adv, mask, {0.5, 1.0, true});
  CHECK(just_inside.below_frac == 0.0);
  auto on_boundary = dis_loss(row({0.0, std::log(0.5)}, true), row({0.0, 0.0}), adv, mask, {0.5, 1.0, true});
  CHECK(on_boundary.below_frac == 1.0);
  CHECK(on_boundary.loss.item<double>() == 0.0);
  // eps = 0 closes the band: even a ratio of exactly 1 is rejected (both sides).
  auto closed = dis_loss(row({0.0, -0.3}, true), row({0.0, -0.3}), adv, mask, {0.0, 0.0, true});
  CHECK(closed.below_frac == 1.0);
  CHECK(closed.above_frac == 1.0);
}

TEST_CASE("DIS gives no gradient outside the band for either sign; PPO keeps its unclipped side") {
  // Ratios 0.5, 0.5, 7, 7 with advantages +1, -1, +1, -1. DIS band (0.7, 6); PPO clip [0.8, 1.2].
  auto behaviour = row({0.0, 0.0, 0.0, 0.0, 0.0});
  auto logp = row({0.0, std::log(0.5), std::log(0.5), std::log(7.0), std::log(7.0)}, true);
  auto adv = row({0.0, 1.0, -1.0, 1.0, -1.0});
  auto mask = mask_row({0, 1, 1, 1, 1});
  auto dis = dis_loss(logp, behaviour, adv, mask, DisOptions{});
  CHECK(dis.below_frac == 0.5);
  CHECK(dis.above_frac == 0.5);
  for (double g : gradient_of(dis.loss, logp)) CHECK(g == 0.0);
  auto ppo = ppo_clip_loss(logp, behaviour, adv, mask, PpoClipOptions{});
  auto grad = gradient_of(ppo.loss, logp);
  CHECK(grad[1] == doctest::Approx(-0.5 * 1.0 / 4));  // r < 1-eps, A > 0: unclipped side, d(-rA/N) = -rA/N
  CHECK(grad[2] == 0.0);                              // r < 1-eps, A < 0: clipped
  CHECK(grad[3] == 0.0);                              // r > 1+eps, A > 0: clipped
  CHECK(grad[4] == doctest::Approx(7.0 / 4));         // r > 1+eps, A < 0: unclipped, gradient kept
  // loss = -(0.5*1 + 0.8*-1 + 1.2*1 + 7*-1) / 4
  CHECK(ppo.loss.item<double>() == doctest::Approx(-(0.5 - 0.8 + 1.2 - 7.0) / 4));
  CHECK(ppo.below_frac == 0.25);
  CHECK(ppo.above_frac == 0.25);
}

TEST_CASE("DIS non-detached variant is the surrogate -r*A: same band, same denominator, same gradient") {
  const double r = std::exp(0.2);
  auto logp = row({0.0, -0.5, 2.0}, true);
  auto behaviour = row({0.0, -0.7, 0.0});  // token 1: r = e^0.2 (trusted); token 2: r = e^2 ~ 7.39 (rejected)
  auto adv = row({0.0, 2.0, 1.0});
  auto mask = mask_row({0, 1, 1});
  auto detached = dis_loss(logp, behaviour, adv, mask, DisOptions{0.3, 5.0, true});
  CHECK(detached.loss.item<double>() == doctest::Approx(-(r * 2.0 * -0.5) / 2));  // -w A logp / N
  auto detached_grad = gradient_of(detached.loss, logp);
  auto surrogate = dis_loss(logp, behaviour, adv, mask, DisOptions{0.3, 5.0, false});
  CHECK(surrogate.loss.item<double>() == doctest::Approx(-(r * 2.0) / 2));  // -r A / N, N counts the rejected token
  auto surrogate_grad = gradient_of(surrogate.loss, logp);
  CHECK(surrogate_grad[1] == doctest::Approx(-r * 2.0 / 2));  // -r A / N: the importance-sampled gradient
  CHECK(surrogate_grad[1] == doctest::Approx(detached_grad[1]));
  CHECK(surrogate_grad[0] == 0.0);
  CHECK(surrogate_grad[2] == 0.0);  // outside the band
  CHECK(surrogate.above_frac == 0.5);
}

TEST_CASE("DIS surrogate: an overflowing ratio outside the band leaves the gradient finite") {
  auto logp = row({0.0, 800.0}, true);  // exp(800) overflows double
  auto behaviour = row({0.0, 0.0});
  auto adv = row({1.0, 1.0});
  auto mask = mask_row({1, 1});
  auto result = dis_loss(logp, behaviour, adv, mask, DisOptions{0.3, 5.0, false});
  CHECK(result.loss.item<double>() == doctest::Approx(-0.5));
  auto grad = gradient_of(result.loss, logp);
  CHECK(grad[0] == doctest::Approx(-0.5));
  CHECK(grad[1] == 0.0);
}

TEST_CASE("DIS and PPO: NaN and inf log-probs off the mask change neither the loss nor its gradient") {
  const double nan = std::nan("");
  const double inf = std::numeric_limits<double>::infinity();
  // Tokens 1 and 3 are actions (ratios 1.0 and 1.5, trusted in (0.5, 2.0));
  // the others hold what a padded or prompt position may hold.
  auto clean_logp = row({0.0, -0.5, 0.0, -1.2, 0.0}, true);
  auto dirty_logp = row({nan, -0.5, inf, -1.2, -inf}, true);
  auto behaviour = row({inf, -0.5, nan, -1.2 - std::log(1.5), 0.0});
  auto adv = row({nan, 2.0, inf, -0.5, 1.0});
  auto mask = mask_row({0, 1, 0, 1, 0});
  for (bool detach : {true, false}) {
    CAPTURE(detach);
    auto clean = dis_loss(clean_logp, behaviour, adv, mask, DisOptions{0.5, 1.0, detach});
    auto dirty = dis_loss(dirty_logp, behaviour, adv, mask, DisOptions{0.5, 1.0, detach});
    // -(1 * 2 * -0.5 + 1.5 * -0.5 * -1.2) / 2 for the detached form; the
    // surrogate -(1 * 2 + 1.5 * -0.5) / 2 otherwise.
    const double expected = detach ? 0.05 : -0.625;
    CHECK(clean.loss.item<double>() == doctest::Approx(expected));
    CHECK(dirty.loss.item<double>() == doctest::Approx(expected));
    const auto grad = gradient_of(dirty.loss, dirty_logp);
    const std::vector<double> want = {0.0, -1.0, 0.0, 0.375, 0.0};  // -r A / N on the actions
    for (size_t i = 0; i < want.size(); ++i) CHECK(grad[i] == doctest::Approx(want[i]));
  }
  auto ppo = ppo_clip_loss(dirty_logp, behaviour, adv, mask, PpoClipOptions{0.2, 0.2, 0.0});
  CHECK(std::isfinite(ppo.loss.item<double>()));
  for (double g : gradient_of(ppo.loss, dirty_logp)) CHECK(std::isfinite(g));
}

TEST_CASE("PPO dual clip bounds the loss of negative-advantage tokens; clip-higher widens the top") {
  auto logp = row({0.0, std::log(7.0)}, true);
  auto behaviour = row({0.0, 0.0});
  auto mask = mask_row({0, 1});
  auto plain = ppo_clip_loss(logp, behaviour, row({0.0, -1.0}), mask, PpoClipOptions{0.2, 0.2, 0.0});
  CHECK(plain.loss.item<double>() == doctest::Approx(7.0));
  auto dual = ppo_clip_loss(logp, behaviour, row({0.0, -1.0}), mask, PpoClipOptions{0.2, 0.2, 3.0});
  CHECK(dual.loss.item<double>() == doctest::Approx(3.0));  // -c*A
  CHECK(dual.dual_clip_frac == 1.0);
  CHECK(gradient_of(dual.loss, logp)[1] == 0.0);
  // Dual clip leaves positive advantages alone.
  auto positive = ppo_clip_loss(logp, behaviour, row({0.0, 1.0}), mask, PpoClipOptions{0.2, 0.2, 3.0});
  CHECK(positive.loss.item<double>() == doctest::Approx(-1.2));

  auto r125 = row({0.0, std::log(1.25)}, true);
  CHECK(ppo_clip_loss(r125, behaviour, row({0.0, 1.0}), mask, {0.2, 0.2, 0.0}).loss.item<double>() ==
        doctest::Approx(-1.2));
  CHECK(ppo_clip_loss(r125, behaviour, row({0.0, 1.0}), mask, {0.2, 0.28, 0.0}).loss.item<double>() ==
        doctest::Approx(-1.25));
}

TEST_CASE("DIS and PPO losses and gradients match a plain-loop reference on random inputs (float64)") {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const int64_t batch = 5, steps = 13;
  for (int trial = 0; trial < 5; ++trial) {
    std::vector<double> lp(batch * steps), b(batch * steps), a(batch * steps);
    std::vector<int64_t> m(batch * steps);
    for (int64_t i = 0; i < batch * steps; ++i) {
      lp[i] = -3.0 * uniform(rng);
      b[i] = lp[i] + 2.0 * (uniform(rng) - 0.5) * 1.5;  // ratios roughly in [0.22, 4.5]
      a[i] = 4.0 * (uniform(rng) - 0.5);
      m[i] = (i % steps) != 0 && uniform(rng) < 0.7;
    }
    m[1] = 1;
    int64_t n = 0;
    for (auto v : m) n += v;
    const DisOptions dis_options{0.3, 1.0, true};
    const PpoClipOptions ppo_options{0.2, 0.28, 3.0};
    double dis_ref = 0.0, ppo_ref = 0.0;
    std::vector<double> dis_grad(batch * steps, 0.0), ppo_grad(batch * steps, 0.0);
    for (int64_t i = 0; i < batch * steps; ++i) {
      if (!m[i]) continue;
      const double r = std::exp(lp[i] - b[i]);
      if (r > 1.0 - dis_options.eps_low && r < 1.0 + dis_options.eps_high) {
        dis_ref += -r * a[i] * lp[i] / static_cast<double>(n);
        dis_grad[i] = -r * a[i] / static_cast<double>(n);
      }
      const double clipped = std::min(std::max(r, 1.0 - ppo_options.eps_low), 1.0 + ppo_options.eps_high);
      double objective = std::min(r * a[i], clipped * a[i]);
      double d_objective = (r * a[i] <= clipped * a[i]) ? r * a[i] : 0.0;  // d/dlogp (dr/dlogp = r)
      if (a[i] < 0 && ppo_options.dual_clip * a[i] > objective) {
        objective = ppo_options.dual_clip * a[i];
        d_objective = 0.0;
      }
      ppo_ref += -objective / static_cast<double>(n);
      ppo_grad[i] = -d_objective / static_cast<double>(n);
    }
    auto logp = torch::tensor(lp, kF64).view({batch, steps}).requires_grad_(true);
    auto behaviour = torch::tensor(b, kF64).view({batch, steps});
    auto adv = torch::tensor(a, kF64).view({batch, steps});
    auto mask = torch::tensor(m, torch::kInt64).view({batch, steps}).to(torch::kBool);
    auto dis = dis_loss(logp, behaviour, adv, mask, dis_options);
    auto ppo = ppo_clip_loss(logp, behaviour, adv, mask, ppo_options);
    CHECK(std::abs(dis.loss.item<double>() - dis_ref) < 1e-6);
    CHECK(std::abs(ppo.loss.item<double>() - ppo_ref) < 1e-6);
    auto g_dis = gradient_of(dis.loss, logp);
    auto g_ppo = gradient_of(ppo.loss, logp);
    double worst = 0.0;
    for (int64_t i = 0; i < batch * steps; ++i) {
      worst = std::max(worst, std::abs(g_dis[i] - dis_grad[i]));
      worst = std::max(worst, std::abs(g_ppo[i] - ppo_grad[i]));
    }
    CHECK(worst < 1e-6);
  }
}

TEST_CASE("value loss: masked MSE over action tokens, optional PPO-style clipping") {
  auto values = row({5.0, 1.0, 2.0, 9.0}, true);
  auto returns = row({0.0, 0.0, 4.0, 0.0});
  auto mask = mask_row({0, 1, 1, 0});
  CHECK(sao::algo::value_loss(values, returns, mask).item<double>() == doctest::Approx(2.5));  // (1 + 4) / 2
  auto v = row({0.0, 1.0}, true);
  auto old = row({0.0, 0.0});
  auto target = row({0.0, 1.1});
  auto m1 = mask_row({0, 1});
  CHECK(sao::algo::value_loss(v, target, m1).item<double>() == doctest::Approx(0.01));
  // Clipped V = 0 + clamp(1, -0.2, 0.2) = 0.2 -> (0.2 - 1.1)^2 = 0.81 is the larger.
  CHECK(sao::algo::value_loss(v, target, m1, old, 0.2).item<double>() == doctest::Approx(0.81));
  CHECK_THROWS_AS(sao::algo::value_loss(v, target, m1, torch::Tensor(), 0.2), sao::Error);
}

TEST_CASE("value_loss: NaN and inf off the mask change neither the loss nor its gradient") {
  const double nan = std::nan("");
  const double inf = std::numeric_limits<double>::infinity();
  auto values = row({nan, 1.0, inf, 3.0, -inf}, true);
  auto returns = row({0.0, 2.0, nan, 1.0, inf});
  auto old = row({inf, 1.0, nan, 3.0, nan});
  auto mask = mask_row({0, 1, 0, 1, 0});
  auto loss = sao::algo::value_loss(values, returns, mask);
  CHECK(loss.item<double>() == doctest::Approx(2.5));  // ((1-2)^2 + (3-1)^2) / 2
  auto grad = gradient_of(loss, values);
  const std::vector<double> expected = {0.0, -1.0, 0.0, 2.0, 0.0};  // 2 (V - R) / N on the mask
  for (size_t i = 0; i < expected.size(); ++i) CHECK(grad[i] == doctest::Approx(expected[i]));
  auto clipped = sao::algo::value_loss(values, returns, mask, old, 0.5);
  CHECK(std::isfinite(clipped.item<double>()));
  for (double g : gradient_of(clipped, values)) CHECK(std::isfinite(g));
}

TEST_CASE("advantage normalisation and explained variance use action tokens only") {
  auto adv = row({5.0, 1.0, 2.0, 3.0, 5.0});
  auto mask = mask_row({0, 1, 1, 1, 0});
  auto normalized = sao::algo::normalize_advantages(adv, mask);
  const double s = std::sqrt(2.0 / 3.0);
  CHECK(normalized[0][1].item<double>() == doctest::Approx(-1.0 / s));
  CHECK(normalized[0][2].item<double>() == doctest::Approx(0.0));
  CHECK(normalized[0][3].item<double>() == doctest::Approx(1.0 / s));
  CHECK(normalized[0][0].item<double>() == 0.0);
  CHECK(normalized[0][4].item<double>() == 0.0);
  // V = [1, 2, 3], R = [1, 2, 4]: 1 - Var([0, 0, 1]) / Var([1, 2, 4]) = 1 - (2/9) / (14/9)
  auto ev = sao::algo::explained_variance(row({9.0, 1.0, 2.0, 3.0}), row({0.0, 1.0, 2.0, 4.0}), mask_row({0, 1, 1, 1}));
  CHECK(ev == doctest::Approx(1.0 - 2.0 / 14.0));
  CHECK(std::isnan(sao::algo::explained_variance(row({0.0, 1.0}), row({0.0, 3.0}), mask_row({0, 1}))));
}

TEST_CASE("GRPO group advantages, with and without std scaling; equal-reward groups give zero") {
  const std::vector<double> rewards = {1, 0, 1, 1, 0.1, 0.1, 0.1, 0.1, 2.0};
  const std::vector<int64_t> groups = {0, 0, 0, 0, 7, 7, 7, 7, 3};
  auto scaled = sao::algo::grpo_advantages(rewards, groups, /*scale_by_std=*/true);
  // Group 0: mean 0.75, sample std 0.5.
  CHECK(scaled[0] == doctest::Approx(0.25 / (0.5 + 1e-6)));
  CHECK(scaled[1] == doctest::Approx(-0.75 / (0.5 + 1e-6)));
  for (int i = 4; i < 9; ++i) CHECK(scaled[i] == 0.0);  // equal rewards, and a group of one
  auto dr = sao::algo::grpo_advantages(rewards, groups, /*scale_by_std=*/false);
  CHECK(dr[0] == doctest::Approx(0.25));
  CHECK(dr[1] == doctest::Approx(-0.75));
  CHECK(dr[5] == 0.0);
  CHECK_THROWS_AS(sao::algo::grpo_advantages({1.0}, {}, true), sao::Error);

  auto on_tokens = sao::algo::broadcast_to_actions(
      {0.5, -1.0}, torch::tensor({0, 1, 1, 0, 1, 0}, torch::kInt64).view({2, 3}).to(torch::kBool));
  CHECK(torch::equal(on_tokens, torch::tensor({0.0f, 0.5f, 0.5f, 0.0f, -1.0f, 0.0f}).view({2, 3})));
}

TEST_CASE("running-mean baseline keeps the last N rewards") {
  sao::algo::RunningMeanBaseline baseline(3);
  CHECK(baseline.mean() == 0.0);
  for (double r : {1.0, 2.0, 3.0, 4.0}) baseline.push(r);
  CHECK(baseline.mean() == doctest::Approx(3.0));
  CHECK(baseline.values().size() == 3);
  baseline.restore({10.0});
  CHECK(baseline.mean() == 10.0);
  CHECK_THROWS_AS(baseline.restore({1, 2, 3, 4}), sao::Error);
  CHECK_THROWS_AS(sao::algo::RunningMeanBaseline(0), sao::Error);
}

TEST_CASE("losses reject a batch without action tokens") {
  auto zero = row({0.0, 0.0});
  CHECK_THROWS_AS(dis_loss(zero, zero, zero, mask_row({0, 0})), sao::Error);
  CHECK_THROWS_AS(ppo_clip_loss(zero, zero, zero, mask_row({0, 0})), sao::Error);
}
