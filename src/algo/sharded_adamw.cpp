// Replicated or ZeRO-1 AdamW; see sharded_adamw.hpp.
#include "algo/sharded_adamw.hpp"

#include "algo/adamw_state.hpp"
#include "base/error.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <numeric>

namespace sao::algo {

std::vector<int> plan_parameter_owners(const std::vector<int64_t>& sizes, int ranks) {
  std::vector<size_t> order(sizes.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return sizes[a] > sizes[b]; });
  std::vector<int64_t> load(static_cast<size_t>(std::max(ranks, 1)), 0);
  std::vector<int> owners(sizes.size(), 0);
  for (const auto i : order) {
    const auto lightest = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    owners[i] = static_cast<int>(lightest);
    load[lightest] += sizes[i];
  }
  return owners;
}

ShardedAdamW::ShardedAdamW(std::vector<torch::Tensor> params, const torch::optim::AdamWOptions& options,
                           std::shared_ptr<RankGroup> ranks, bool shard)
    : params_(std::move(params)), options_(options), ranks_(std::move(ranks)) {
  sharded_ = shard && ranks_->size() > 1;
  std::vector<int64_t> sizes;
  for (const auto& p : params_) sizes.push_back(p.numel());
  owners_ = sharded_ ? plan_parameter_owners(sizes, ranks_->size()) : std::vector<int>(params_.size(), 0);
  std::vector<torch::Tensor> mine;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!sharded_ || owners_[i] == ranks_->rank()) mine.push_back(params_[i]);
  }
  local_ = std::make_unique<torch::optim::AdamW>(mine, options_);
}

std::unique_ptr<torch::optim::AdamW> ShardedAdamW::make_full() const {
  auto full = std::make_unique<torch::optim::AdamW>(params_, options_);
  // The live learning rate, not the one the learner started with.
  static_cast<torch::optim::AdamWOptions&>(full->param_groups().front().options())
      .lr(static_cast<torch::optim::AdamWOptions&>(local_->param_groups().front().options()).lr());
  return full;
}

void ShardedAdamW::zero_grad() {
  torch::NoGradGuard no_grad;
  for (auto& p : params_) {
    if (p.grad().defined()) p.mutable_grad().zero_();
  }
}

void ShardedAdamW::step() {
  local_->step();
  if (!sharded_) return;
  for (int r = 0; r < ranks_->size(); ++r) {
    std::vector<torch::Tensor> owned;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (owners_[i] == r) owned.push_back(params_[i]);
    }
    broadcast_tensors(*ranks_, owned, r);
  }
}

void ShardedAdamW::set_lr(double lr) {
  for (auto& group : local_->param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
}

int64_t ShardedAdamW::state_bytes() {
  int64_t bytes = 0;
  for (const auto& p : params_) {
    if (const auto* state = adamw_state(*local_, p)) {
      bytes += state->exp_avg().numel() * state->exp_avg().element_size();
      bytes += state->exp_avg_sq().numel() * state->exp_avg_sq().element_size();
    }
  }
  return bytes;
}

namespace {
// Parameter i's state moves from rank `from` to the ranks that `keep`: a
// step count (-1: no state) and, when there is one, both moments.
void move_state(RankGroup& ranks, torch::optim::AdamW* from_optimizer, torch::optim::AdamW* to_optimizer,
                const torch::Tensor& param, int from) {
  auto step = torch::full({1}, int64_t{-1}, torch::kInt64);
  const torch::optim::AdamWParamState* source = from_optimizer ? adamw_state(*from_optimizer, param) : nullptr;
  if (ranks.rank() == from && source != nullptr) step[0] = source->step();
  ranks.broadcast(step, from);
  if (step[0].item<int64_t>() < 0) return;
  auto exp_avg = ranks.rank() == from ? source->exp_avg().detach().clone() : torch::zeros_like(param);
  auto exp_avg_sq = ranks.rank() == from ? source->exp_avg_sq().detach().clone() : torch::zeros_like(param);
  broadcast_tensors(ranks, {exp_avg, exp_avg_sq}, from);
  if (to_optimizer == nullptr) return;
  auto state = std::make_unique<torch::optim::AdamWParamState>();
  state->step(step[0].item<int64_t>());
  state->exp_avg(exp_avg);
  state->exp_avg_sq(exp_avg_sq);
  put_adamw_state(*to_optimizer, param, std::move(state));
}
}  // namespace

void ShardedAdamW::share_from(int root) {
  if (!sharded_) {
    share_adamw_state(*ranks_, *local_, params_, root);
    return;
  }
  torch::NoGradGuard no_grad;
  auto loaded = torch::full({1}, int64_t{loaded_ != nullptr ? 1 : 0}, torch::kInt64);
  ranks_->broadcast(loaded, root);
  local_->state().clear();
  if (loaded[0].item<int64_t>() == 0) return;  // a fresh run: no state anywhere
  for (size_t i = 0; i < params_.size(); ++i) {
    const bool mine = owners_[i] == ranks_->rank();
    move_state(*ranks_, loaded_.get(), mine ? local_.get() : nullptr, params_[i], root);
  }
  loaded_.reset();
}

void ShardedAdamW::save(const std::string& path, int root) {
  if (!sharded_) {
    if (ranks_->rank() == root) torch::save(*local_, path);
    return;
  }
  torch::NoGradGuard no_grad;
  auto full = ranks_->rank() == root ? make_full() : nullptr;
  for (size_t i = 0; i < params_.size(); ++i) {
    move_state(*ranks_, local_.get(), full.get(), params_[i], owners_[i]);
  }
  if (full) torch::save(*full, path);
}

torch::optim::AdamW& ShardedAdamW::load_target() {
  if (!sharded_) return *local_;
  loaded_ = make_full();
  return *loaded_;
}

}  // namespace sao::algo
