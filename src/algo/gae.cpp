// Skip-observation GAE; see gae.hpp for the recurrence.
#include "algo/gae.hpp"

#include "base/error.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <string>

namespace sao::algo {

namespace {

void check_shapes(const torch::Tensor& rewards, const torch::Tensor& values, const torch::Tensor& action_mask,
                  const torch::Tensor& terminated, const torch::Tensor& bootstrap, const torch::Tensor& lambdas) {
  if (rewards.dim() != 2) throw Error("skip_observation_gae: rewards must be [B, T]");
  const auto shape = rewards.sizes();
  if (values.sizes() != shape || action_mask.sizes() != shape) {
    throw Error("skip_observation_gae: rewards, values and action_mask must all be [B, T]");
  }
  const int64_t batch = shape[0];
  for (const auto* t : {&terminated, &bootstrap, &lambdas}) {
    if (t->dim() != 1 || t->size(0) != batch)
      throw Error("skip_observation_gae: terminated, bootstrap and lambdas must be [B]");
  }
}

}  // namespace

GaeResult skip_observation_gae(const torch::Tensor& rewards, const torch::Tensor& values,
                               const torch::Tensor& action_mask, const torch::Tensor& terminated,
                               const torch::Tensor& bootstrap, double gamma, const torch::Tensor& lambdas) {
  check_shapes(rewards, values, action_mask, terminated, bootstrap, lambdas);
  auto r = rewards.detach().to(torch::kCPU, torch::kFloat64).contiguous();
  auto v = values.detach().to(torch::kCPU, torch::kFloat64).contiguous();
  auto m = action_mask.to(torch::kCPU, torch::kBool).contiguous();
  auto done = terminated.to(torch::kCPU, torch::kBool).contiguous();
  auto boot = bootstrap.detach().to(torch::kCPU, torch::kFloat64).contiguous();
  auto lam = lambdas.detach().to(torch::kCPU, torch::kFloat64).contiguous();
  auto advantages = torch::zeros_like(v);  // [B, T] float64
  auto returns = torch::zeros_like(v);
  auto ra = r.accessor<double, 2>();
  auto va = v.accessor<double, 2>();
  auto ma = m.accessor<bool, 2>();
  auto aa = advantages.accessor<double, 2>();
  auto ta = returns.accessor<double, 2>();
  auto done_a = done.accessor<bool, 1>();
  auto boot_a = boot.accessor<double, 1>();
  auto lam_a = lam.accessor<double, 1>();
  const int64_t batch = r.size(0), steps = r.size(1);
  for (int64_t b = 0; b < batch; ++b) {
    // Walk backwards over action positions only; (next_value, next_adv)
    // describe the next action position q, or the end of the episode.
    double next_value = done_a[b] ? 0.0 : boot_a[b];
    double next_advantage = 0.0;
    const double lambda = lam_a[b];
    for (int64_t t = steps - 1; t >= 0; --t) {
      if (!ma[b][t]) {
        if (ra[b][t] != 0.0) {
          throw Error("skip_observation_gae: reward " + std::to_string(ra[b][t]) + " on non-action token (row " +
                      std::to_string(b) + ", position " + std::to_string(t) + ")");
        }
        continue;
      }
      const double delta = ra[b][t] + gamma * next_value - va[b][t];
      aa[b][t] = delta + gamma * lambda * next_advantage;
      ta[b][t] = aa[b][t] + va[b][t];
      next_value = va[b][t];
      next_advantage = aa[b][t];
    }
  }
  return {advantages.to(values.options().requires_grad(false)), returns.to(values.options().requires_grad(false))};
}

torch::Tensor length_adaptive_lambda(const torch::Tensor& action_mask, double alpha) {
  if (!(alpha > 0)) throw Error("length_adaptive_lambda: alpha must be > 0, got " + std::to_string(alpha));
  auto lengths = action_mask.to(torch::kCPU, torch::kBool).sum(1).to(torch::kFloat64);  // [B]
  auto lambdas = (1.0 - 1.0 / (alpha * lengths)).clamp(0.0, 1.0);
  return torch::where(lengths > 0, lambdas, torch::zeros_like(lambdas));
}

torch::Tensor constant_lambda(int64_t batch_size, double lambda) {
  if (!(lambda >= 0 && lambda <= 1)) throw Error("lambda must be in [0, 1], got " + std::to_string(lambda));
  return torch::full({batch_size}, lambda, torch::kFloat64);
}

}  // namespace sao::algo
