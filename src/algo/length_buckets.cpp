// Length buckets; see length_buckets.hpp.
#include "algo/length_buckets.hpp"

#include "base/error.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <string>

namespace sao::algo {

std::vector<LengthBucket> plan_length_buckets(const std::vector<int64_t>& lengths, int64_t max_buckets,
                                              int64_t overhead_tokens) {
  if (max_buckets < 1) throw Error("plan_length_buckets: max_buckets must be >= 1, got " + std::to_string(max_buckets));
  if (overhead_tokens < 0) throw Error("plan_length_buckets: overhead_tokens must be >= 0");
  const auto rows = static_cast<int64_t>(lengths.size());
  if (rows == 0) return {};
  std::vector<int64_t> order(lengths.size());
  std::iota(order.begin(), order.end(), 0);
  // Stable, so rows of equal length keep their batch order.
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return lengths[a] < lengths[b]; });
  const auto length_at = [&](int64_t sorted) {
    return lengths[static_cast<size_t>(order[static_cast<size_t>(sorted)])];
  };
  const int64_t groups = std::min(max_buckets, rows);
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  // cost[g][i]: the cheapest split of the i shortest rows into g groups;
  // start[g][i]: where that split's last group starts.
  std::vector<std::vector<int64_t>> cost(static_cast<size_t>(groups + 1), std::vector<int64_t>(rows + 1, kNone));
  std::vector<std::vector<int64_t>> start(static_cast<size_t>(groups + 1), std::vector<int64_t>(rows + 1, 0));
  cost[0][0] = 0;
  for (int64_t g = 1; g <= groups; ++g) {
    for (int64_t end = g; end <= rows; ++end) {
      for (int64_t begin = g - 1; begin < end; ++begin) {
        const int64_t before = cost[g - 1][begin];
        if (before == kNone) continue;
        const int64_t total = before + (end - begin) * length_at(end - 1) + (g > 1 ? overhead_tokens : 0);
        if (total < cost[g][end]) {
          cost[g][end] = total;
          start[g][end] = begin;
        }
      }
    }
  }
  int64_t best = 1;
  for (int64_t g = 2; g <= groups; ++g) {
    if (cost[g][rows] < cost[best][rows]) best = g;  // strictly cheaper: ties keep fewer groups
  }
  std::vector<LengthBucket> buckets(static_cast<size_t>(best));
  for (int64_t g = best, end = rows; g >= 1; --g) {
    const int64_t begin = start[g][end];
    auto& bucket = buckets[static_cast<size_t>(g - 1)];
    for (int64_t i = begin; i < end; ++i) bucket.rows.push_back(order[static_cast<size_t>(i)]);
    bucket.width = length_at(end - 1);
    end = begin;
  }
  return buckets;
}

std::vector<std::vector<int64_t>> plan_rank_shares(const std::vector<int64_t>& lengths, int64_t ranks) {
  if (ranks < 1) throw Error("plan_rank_shares: ranks must be >= 1, got " + std::to_string(ranks));
  std::vector<int64_t> order(lengths.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  // Longest first; equal lengths in row order, so the split is a function of the lengths alone.
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return lengths[static_cast<size_t>(a)] > lengths[static_cast<size_t>(b)];
  });
  std::vector<std::vector<int64_t>> shares(static_cast<size_t>(ranks));
  std::vector<int64_t> tokens(static_cast<size_t>(ranks), 0);
  for (const int64_t row : order) {
    const auto lightest = static_cast<size_t>(std::min_element(tokens.begin(), tokens.end()) - tokens.begin());
    shares[lightest].push_back(row);
    tokens[lightest] += lengths[static_cast<size_t>(row)];
  }
  for (auto& share : shares) std::sort(share.begin(), share.end());
  return shares;
}

}  // namespace sao::algo
