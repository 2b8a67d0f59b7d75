// The learner step's plan; see step_plan.hpp.
#include "algo/step_plan.hpp"

#include "base/error.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <string>

namespace sao::algo {

StepPlan plan_step(const std::vector<int64_t>& lengths, int64_t rank, int64_t ranks, int64_t micro_batch_tokens,
                   int64_t max_length_buckets) {
  if (rank < 0 || rank >= ranks) {
    throw Error("learner step plan: rank " + std::to_string(rank) + " of " + std::to_string(ranks));
  }
  if (static_cast<int64_t>(lengths.size()) < ranks) {
    throw Error("learner: a batch of " + std::to_string(lengths.size()) + " trajectories cannot be split over " +
                std::to_string(ranks) + " learner ranks (each needs one at least)");
  }
  StepPlan plan;
  plan.share = ranks == 1 ? std::vector<int64_t>() : plan_rank_shares(lengths, ranks)[static_cast<size_t>(rank)];
  if (ranks == 1) {
    plan.share.resize(lengths.size());
    for (size_t i = 0; i < lengths.size(); ++i) plan.share[i] = static_cast<int64_t>(i);
  }
  std::vector<int64_t> share_lengths;
  for (const auto row : plan.share) {
    share_lengths.push_back(lengths[static_cast<size_t>(row)]);
    plan.share_tokens += lengths[static_cast<size_t>(row)];
  }
  // Micro-batches: the share's rows by length, cut where one more row would
  // pass the limit at the piece's width (its longest row).
  std::vector<std::vector<int64_t>> groups;
  if (micro_batch_tokens <= 0) {
    groups.emplace_back(share_lengths.size());
    for (size_t i = 0; i < share_lengths.size(); ++i) groups.back()[i] = static_cast<int64_t>(i);
  } else {
    std::vector<int64_t> order(share_lengths.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return share_lengths[static_cast<size_t>(a)] < share_lengths[static_cast<size_t>(b)];
    });
    for (const auto row : order) {
      const int64_t width = share_lengths[static_cast<size_t>(row)];  // ascending: the longest so far
      if (groups.empty() || static_cast<int64_t>(groups.back().size() + 1) * width > micro_batch_tokens) {
        groups.emplace_back();
      }
      groups.back().push_back(row);
    }
    for (auto& group : groups) std::sort(group.begin(), group.end());
  }
  for (auto& group : groups) {
    StepPiece piece;
    std::vector<int64_t> piece_lengths;
    for (const auto row : group) piece_lengths.push_back(share_lengths[static_cast<size_t>(row)]);
    piece.rows = std::move(group);
    piece.buckets = plan_length_buckets(piece_lengths, max_length_buckets, kLengthBucketOverheadTokens);
    for (const auto& bucket : piece.buckets) {
      piece.padded_tokens += static_cast<int64_t>(bucket.rows.size()) * bucket.width;
    }
    plan.pieces.push_back(std::move(piece));
  }
  return plan;
}

torch::Tensor row_index(const std::vector<int64_t>& rows, const torch::Device& device) {
  return torch::tensor(rows, torch::kInt64).to(device);
}

TrajectoryBatch select_rows(const TrajectoryBatch& batch, const std::vector<int64_t>& rows) {
  const auto index = row_index(rows, batch.input_ids.device());
  TrajectoryBatch out;
  auto pick = [&](const torch::Tensor& t) { return t.defined() ? t.index_select(0, index.to(t.device())) : t; };
  out.input_ids = pick(batch.input_ids);
  out.action_mask = pick(batch.action_mask);
  out.valid_mask = pick(batch.valid_mask);
  out.behaviour_logprobs = pick(batch.behaviour_logprobs);
  out.versions = pick(batch.versions);
  out.rewards = pick(batch.rewards);
  out.terminated = pick(batch.terminated);
  out.lengths = pick(batch.lengths);
  out.num_actions = pick(batch.num_actions);
  out.group_ids = pick(batch.group_ids);
  out.returns = pick(batch.returns);
  return out;
}

}  // namespace sao::algo
