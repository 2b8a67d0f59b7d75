// How one learner step's batch is cut up: the rows this rank computes (its
// share of a data-parallel step), those rows in micro-batches of at most
// `micro_batch_tokens` padded tokens, and each micro-batch's length
// buckets. Why one plan: the three cuts nest (ranks > micro-batches >
// buckets) and the losses must stay the whole batch's (each part is
// normalised by the batch's action-token count, algo/losses.hpp), so the
// parts' gradients add up to exactly one pass over the whole batch.
#pragma once

#include "algo/length_buckets.hpp"
#include "algo/trajectory.hpp"

#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace sao::algo {

// One forward/backward pass: rows of the rank's share (indices into the
// share's batch), and their length buckets (indices into `rows`).
struct StepPiece {
  std::vector<int64_t> rows;
  std::vector<LengthBucket> buckets;
  int64_t padded_tokens = 0;  // sum over buckets of rows x width
};

struct StepPlan {
  std::vector<int64_t> share;     // rows of the whole batch this rank computes, ascending
  std::vector<StepPiece> pieces;  // the share in micro-batches (one when micro-batching is off)
  int64_t share_tokens = 0;       // real tokens in the share
};

// lengths: real tokens of each row of the whole batch. micro_batch_tokens 0:
// one piece. A piece holds at least one row, so a row longer than the limit
// is a piece of its own. Throws sao::Error when there are fewer rows than
// ranks (every rank must have work: a share is never empty).
StepPlan plan_step(const std::vector<int64_t>& lengths, int64_t rank, int64_t ranks, int64_t micro_batch_tokens,
                   int64_t max_length_buckets);

// The batch's rows `rows` (every per-row tensor), on the batch's device.
TrajectoryBatch select_rows(const TrajectoryBatch& batch, const std::vector<int64_t>& rows);

// `rows` as an int64 index tensor on `device`.
torch::Tensor row_index(const std::vector<int64_t>& rows, const torch::Device& device);

}  // namespace sao::algo
