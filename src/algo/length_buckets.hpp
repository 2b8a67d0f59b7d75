// Length buckets: the rows of a learner batch grouped by length so that each
// group's forward and backward pass runs at the group's own width. A batch of
// multi-turn episodes mixes short and long rows; padded to the longest, a
// 64-episode maze batch computes ~30% padding. The model is causal and pads
// on the right, so a row's outputs at its real positions do not depend on
// the width it runs at: bucketing changes the work, not the maths (outputs
// at padding positions, which every loss masks out, become 0).
#pragma once

#include <cstdint>
#include <vector>

namespace sao::algo {

struct LengthBucket {
  std::vector<int64_t> rows;  // batch rows, ascending length
  int64_t width = 0;          // the longest of them
};

// Splits rows (lengths[i] = real tokens of row i) into at most max_buckets
// groups of consecutive lengths, minimising
//   sum over groups of (rows x width) + overhead_tokens x (groups - 1),
// where overhead_tokens prices one more pass (its fixed cost in token
// positions), so lengths that barely differ stay one group. Exact (dynamic
// programming over the sorted lengths), deterministic: ties keep fewer
// groups. Buckets come shortest first; together they hold every row once.
std::vector<LengthBucket> plan_length_buckets(const std::vector<int64_t>& lengths, int64_t max_buckets,
                                              int64_t overhead_tokens);

// Rows of a batch split over `ranks` data-parallel learner ranks by tokens:
// longest rows first, each to the rank with the fewest tokens so far (ties:
// the lower rank), so every rank's share of the step's work is close to
// 1/ranks. Deterministic: every rank computes the same split from the same
// lengths. Each share lists its rows ascending; a share is empty only when
// there are fewer rows than ranks.
std::vector<std::vector<int64_t>> plan_rank_shares(const std::vector<int64_t>& lengths, int64_t ranks);

// The fixed cost of one more pass, in token positions, that the learner
// uses: a split must save more padding than this. On the default model a
// forward pass costs a few hundred microseconds of fixed overhead (kernel
// launches of ~60 small ops), about what 256 token positions of compute cost.
inline constexpr int64_t kLengthBucketOverheadTokens = 256;

}  // namespace sao::algo
