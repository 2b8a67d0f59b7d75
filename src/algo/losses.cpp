// Policy/value losses and baselines; see losses.hpp for the definitions.
#include "algo/losses.hpp"

#include "base/error.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <string>

namespace sao::algo {

namespace {

void check_same_shape(const char* what, const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& c,
                      const torch::Tensor& mask) {
  if (a.dim() != 2 || a.sizes() != b.sizes() || a.sizes() != c.sizes() || a.sizes() != mask.sizes()) {
    throw Error(std::string(what) + ": all inputs must be [B, T] of the same shape");
  }
}

int64_t count_actions(const char* what, const torch::Tensor& mask) {
  const int64_t n = mask.sum().item<int64_t>();
  if (n == 0) throw Error(std::string(what) + ": the batch has no action token");
  return n;
}

// N of the loss: the whole batch's count when the caller passes it.
double normaliser(const char* what, int64_t own_tokens, int64_t batch_tokens) {
  if (batch_tokens == 0) return static_cast<double>(own_tokens);
  if (batch_tokens < own_tokens) {
    throw Error(std::string(what) + ": batch_tokens " + std::to_string(batch_tokens) + " is less than the " +
                std::to_string(own_tokens) + " action tokens of this part");
  }
  return static_cast<double>(batch_tokens);
}

// Ratio statistics over action tokens; `ratio` [B, T] detached.
void fill_ratio_stats(PolicyLossResult& out, const torch::Tensor& ratio, const torch::Tensor& mask) {
  auto selected = ratio.masked_select(mask);
  out.ratio_sum = selected.to(torch::kFloat64).sum().item<double>();
  out.ratio_mean = out.ratio_sum / static_cast<double>(selected.numel());
  out.ratio_max = selected.max().to(torch::kFloat64).item<double>();
}

int64_t count(const torch::Tensor& flags) {
  return flags.sum().item<int64_t>();
}

double fraction(int64_t flagged, int64_t n) {
  return static_cast<double>(flagged) / static_cast<double>(n);
}

}  // namespace

DisBandFlags dis_outside_band(const torch::Tensor& ratio, const DisOptions& options) {
  return {ratio <= 1.0 - options.eps_low, ratio >= 1.0 + options.eps_high};
}

PolicyLossResult dis_loss(const torch::Tensor& logprobs, const torch::Tensor& behaviour_logprobs,
                          const torch::Tensor& advantages, const torch::Tensor& action_mask, const DisOptions& options,
                          int64_t batch_tokens) {
  check_same_shape("dis_loss", logprobs, behaviour_logprobs, advantages, action_mask);
  if (options.eps_low < 0 || options.eps_high < 0) throw Error("dis_loss: eps_low and eps_high must be >= 0");
  auto mask = action_mask.to(torch::kBool);
  PolicyLossResult out;
  out.tokens = count_actions("dis_loss", mask);
  // [B, T]; off-action entries are zeroed before exp so they cannot overflow.
  auto log_ratio = torch::where(mask, logprobs - behaviour_logprobs, torch::zeros_like(logprobs));
  auto ratio = log_ratio.detach().exp();
  const auto band = dis_outside_band(ratio, options);
  auto below = mask & band.below;
  auto above = mask & band.above;
  auto trusted = mask & ~below & ~above;
  auto zero = torch::zeros_like(logprobs);
  // Ratio (or log-ratio) and advantage are zeroed outside the band BEFORE
  // multiplying, so the gradient there is exactly 0 even if the ratio
  // overflowed (0 * inf in a backward pass would be NaN).
  auto adv = torch::where(trusted, advantages.detach().to(logprobs.scalar_type()), zero);
  torch::Tensor terms;  // [B, T]
  if (options.detach_weight) {
    // Selected after multiplying too: log-probs off the band may be NaN or
    // infinite, and 0 * NaN would reach the loss value.
    terms = torch::where(trusted, torch::where(trusted, ratio, zero) * adv * logprobs, zero);
  } else {
    // Surrogate r_t A_t: gradient r A grad(logp), the importance-sampled
    // policy gradient, identical to the detached form's.
    auto live_ratio = torch::where(trusted, log_ratio, zero).exp();
    terms = torch::where(trusted, live_ratio * adv, zero);
  }
  out.loss = -terms.sum() / normaliser("dis_loss", out.tokens, batch_tokens);
  out.below_tokens = count(below);
  out.above_tokens = count(above);
  out.below_frac = fraction(out.below_tokens, out.tokens);
  out.above_frac = fraction(out.above_tokens, out.tokens);
  fill_ratio_stats(out, ratio, mask);
  return out;
}

PolicyLossResult ppo_clip_loss(const torch::Tensor& logprobs, const torch::Tensor& behaviour_logprobs,
                               const torch::Tensor& advantages, const torch::Tensor& action_mask,
                               const PpoClipOptions& options, int64_t batch_tokens) {
  check_same_shape("ppo_clip_loss", logprobs, behaviour_logprobs, advantages, action_mask);
  if (options.eps_low < 0 || options.eps_low >= 1 || options.eps_high < 0) {
    throw Error("ppo_clip_loss: need 0 <= eps_low < 1 and eps_high >= 0");
  }
  if (options.dual_clip != 0.0 && !(options.dual_clip > 1.0))
    throw Error("ppo_clip_loss: dual_clip must be > 1 (or 0)");
  auto mask = action_mask.to(torch::kBool);
  PolicyLossResult out;
  out.tokens = count_actions("ppo_clip_loss", mask);
  auto zero = torch::zeros_like(logprobs);
  auto adv = torch::where(mask, advantages.detach().to(logprobs.scalar_type()), zero);
  auto ratio = torch::where(mask, logprobs - behaviour_logprobs, zero).exp();  // [B, T], 1 off actions
  auto clipped = ratio.clamp(1.0 - options.eps_low, 1.0 + options.eps_high);
  auto objective = torch::min(ratio * adv, clipped * adv);  // [B, T]
  if (options.dual_clip > 0) {
    auto bounded = torch::max(objective, options.dual_clip * adv);
    out.dual_clip_tokens = count(mask & (adv < 0) & (options.dual_clip * adv > objective.detach()));
    out.dual_clip_frac = fraction(out.dual_clip_tokens, out.tokens);
    objective = torch::where(adv < 0, bounded, objective);
  }
  out.loss = -torch::where(mask, objective, zero).sum() / normaliser("ppo_clip_loss", out.tokens, batch_tokens);
  auto r = ratio.detach();
  out.below_tokens = count(mask & (adv < 0) & (r < 1.0 - options.eps_low));
  out.above_tokens = count(mask & (adv > 0) & (r > 1.0 + options.eps_high));
  out.below_frac = fraction(out.below_tokens, out.tokens);
  out.above_frac = fraction(out.above_tokens, out.tokens);
  fill_ratio_stats(out, r, mask);
  return out;
}

torch::Tensor masked_mean(const torch::Tensor& x, const torch::Tensor& mask, int64_t batch_tokens) {
  auto m = mask.to(torch::kBool);
  const int64_t n = count_actions("masked_mean", m);
  return torch::where(m, x, torch::zeros_like(x)).sum() / normaliser("masked_mean", n, batch_tokens);
}

torch::Tensor value_loss(const torch::Tensor& values, const torch::Tensor& returns, const torch::Tensor& action_mask,
                         const torch::Tensor& old_values, double clip, int64_t batch_tokens) {
  check_same_shape("value_loss", values, returns, returns, action_mask);
  // Every input is selected onto the mask BEFORE any arithmetic: a NaN or
  // inf off the mask must reach neither the loss nor its gradient (the
  // backward of x^2 at x = NaN is NaN, even when a later mask zeroes it).
  auto mask = action_mask.to(torch::kBool);
  auto zero = torch::zeros_like(values);
  auto on_mask = [&](const torch::Tensor& x) { return torch::where(mask, x.to(values.scalar_type()), zero); };
  auto predicted = on_mask(values);
  auto target = on_mask(returns.detach());
  auto squared = (predicted - target).pow(2);  // [B, T], 0 off the mask
  if (clip > 0) {
    if (!old_values.defined() || old_values.sizes() != values.sizes()) {
      throw Error("value_loss: value clipping needs old_values of shape [B, T]");
    }
    auto old = on_mask(old_values.detach());
    auto clipped = old + (predicted - old).clamp(-clip, clip);
    squared = torch::max(squared, (clipped - target).pow(2));
  }
  return masked_mean(squared, mask, batch_tokens);
}

torch::Tensor normalize_advantages(const torch::Tensor& advantages, const torch::Tensor& action_mask, double eps) {
  auto mask = action_mask.to(torch::kBool);
  auto selected = advantages.masked_select(mask);
  if (selected.numel() == 0) throw Error("normalize_advantages: the batch has no action token");
  auto mean = selected.mean();
  auto std = selected.std(/*unbiased=*/false);
  auto normalized = (advantages - mean) / (std + eps);
  return torch::where(mask, normalized, torch::zeros_like(advantages));
}

torch::Tensor normalize_advantages(const torch::Tensor& advantages, const torch::Tensor& action_mask, double mean,
                                   double std, double eps) {
  auto mask = action_mask.to(torch::kBool);
  auto normalized = (advantages - mean) / (std + eps);
  return torch::where(mask, normalized, torch::zeros_like(advantages));
}

double explained_variance(const torch::Tensor& values, const torch::Tensor& returns, const torch::Tensor& action_mask) {
  auto mask = action_mask.to(torch::kBool);
  auto v = values.detach().masked_select(mask).to(torch::kFloat64);
  auto r = returns.detach().masked_select(mask).to(torch::kFloat64);
  if (r.numel() == 0) return std::nan("");
  const double var_r = r.var(/*unbiased=*/false).item<double>();
  if (!(var_r > 0)) return std::nan("");
  return 1.0 - (r - v).var(/*unbiased=*/false).item<double>() / var_r;
}

double mean_over_actions(const torch::Tensor& x, const torch::Tensor& action_mask) {
  auto selected = x.detach().masked_select(action_mask.to(torch::kBool)).to(torch::kFloat64);
  return selected.numel() == 0 ? std::nan("") : selected.mean().item<double>();
}

std::vector<double> grpo_advantages(const std::vector<double>& rewards, const std::vector<int64_t>& group_ids,
                                    bool scale_by_std, double eps) {
  if (rewards.size() != group_ids.size()) {
    throw Error("grpo_advantages: " + std::to_string(rewards.size()) + " rewards but " +
                std::to_string(group_ids.size()) + " group ids");
  }
  std::map<int64_t, std::vector<size_t>> members;
  for (size_t i = 0; i < rewards.size(); ++i) members[group_ids[i]].push_back(i);
  std::vector<double> advantages(rewards.size(), 0.0);
  for (const auto& [group, indices] : members) {
    auto [lo, hi] = std::minmax_element(indices.begin(), indices.end(),
                                        [&](size_t a, size_t b) { return rewards[a] < rewards[b]; });
    if (rewards[*lo] == rewards[*hi]) continue;  // all equal: exactly zero (also a group of one)
    double mean = 0.0;
    for (size_t i : indices) mean += rewards[i];
    mean /= static_cast<double>(indices.size());
    double sum_sq = 0.0;
    for (size_t i : indices) sum_sq += (rewards[i] - mean) * (rewards[i] - mean);
    const double std = indices.size() > 1 ? std::sqrt(sum_sq / static_cast<double>(indices.size() - 1)) : 0.0;
    for (size_t i : indices) advantages[i] = scale_by_std ? (rewards[i] - mean) / (std + eps) : rewards[i] - mean;
  }
  return advantages;
}

torch::Tensor broadcast_to_actions(const std::vector<double>& per_trajectory, const torch::Tensor& action_mask,
                                   torch::ScalarType dtype) {
  if (action_mask.dim() != 2 || static_cast<size_t>(action_mask.size(0)) != per_trajectory.size()) {
    throw Error("broadcast_to_actions: need one value per row of action_mask [B, T]");
  }
  auto values = torch::tensor(per_trajectory, torch::kFloat64).unsqueeze(1);  // [B, 1]
  auto mask = action_mask.to(torch::kBool);
  return torch::where(mask, values.expand(action_mask.sizes()), torch::zeros({1, 1}, torch::kFloat64)).to(dtype);
}

RunningMeanBaseline::RunningMeanBaseline(size_t window) : window_(window) {
  if (window == 0) throw Error("running-mean baseline: window must be >= 1");
}

double RunningMeanBaseline::mean() const {
  if (values_.empty()) return 0.0;
  return std::accumulate(values_.begin(), values_.end(), 0.0) / static_cast<double>(values_.size());
}

void RunningMeanBaseline::push(double reward) {
  values_.push_back(reward);
  while (values_.size() > window_) values_.pop_front();
}

void RunningMeanBaseline::restore(const std::vector<double>& values) {
  if (values.size() > window_) {
    throw Error("running-mean baseline: " + std::to_string(values.size()) + " saved rewards exceed the window of " +
                std::to_string(window_));
  }
  values_.assign(values.begin(), values.end());
}

}  // namespace sao::algo
