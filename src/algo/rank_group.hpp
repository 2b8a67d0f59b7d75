// The ranks one learner step is spread over, and the collectives the step
// needs. Why an interface: one rank and N ranks run the same learner code
// (algo/learner.hpp); with one rank every collective is the identity, with
// N it is PyTorch's own c10d (Gloo here; NCCL is the GPU machines' kind,
// issue #51), never a home-made all-reduce.
//
// Every rank must call the same collectives in the same order with tensors
// of the same shape and dtype: the learner guarantees that by deciding
// every branch from values that are already equal on all ranks (the whole
// batch, or a reduced number).
#pragma once

#include "base/error.hpp"

#include <torch/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace sao::algo {

// A collective failed: a rank died, hung past the timeout or left. The step
// is lost on every rank; the run stops and resumes from its last checkpoint.
class RankFailure : public Error {
 public:
  using Error::Error;
};

enum class ReduceOp { kSum, kMax, kMin };

class RankGroup {
 public:
  virtual ~RankGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Element-wise across ranks, in place. `tensor` is contiguous; throws
  // RankFailure when the collective fails.
  virtual void all_reduce(torch::Tensor& tensor, ReduceOp op) = 0;
  // `tensor` (same shape and dtype everywhere) takes rank `root`'s values.
  virtual void broadcast(torch::Tensor& tensor, int root) = 0;
  // Wall seconds spent inside collectives since the group was made.
  double collective_seconds() const { return collective_seconds_; }

 protected:
  double collective_seconds_ = 0.0;
};

// The one-rank group: every collective leaves its tensor as it is.
std::shared_ptr<RankGroup> single_rank();

// `values` of this rank combined over all ranks by `op`, in one collective.
std::vector<double> reduce_numbers(RankGroup& group, std::vector<double> values, ReduceOp op);

// Sums the gradients of `params` over the ranks, flattened into one buffer
// (one collective). A parameter whose gradient is undefined on some ranks
// but not all counts as 0 there; one without a gradient on any rank stays
// without (so the optimiser leaves it alone, as on one rank).
void reduce_gradients(RankGroup& group, const std::vector<torch::Tensor>& params);

// Every rank's copy of `tensors` takes rank `root`'s values (one collective
// per dtype).
void broadcast_tensors(RankGroup& group, const std::vector<torch::Tensor>& tensors, int root);

// A number that differs between two ranks whose `tensors` differ in any
// element: the sum of the elements' bit patterns, as integers. Not a
// cryptographic hash; it detects ranks that drifted apart.
int64_t bit_fingerprint(const std::vector<torch::Tensor>& tensors);

// Every rank's `value`, in rank order.
std::vector<int64_t> gather_numbers(RankGroup& group, int64_t value);

struct RankGroupOptions {
  std::string host = "127.0.0.1";  // rank 0's address: its rendezvous store listens on `port`
  uint16_t port = 29400;
  int rank = 0;
  int size = 1;
  // How long the rendezvous waits for every rank, and how long one
  // collective may wait for a peer before the step fails.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  // Rank 0 only: called with the port its store listens on, before it waits
  // for the other ranks (port 0 asks the OS for a free one).
  std::function<void(uint16_t)> on_listening;
};

// Joins (rank 0: opens) a c10d group of `size` ranks over Gloo: a
// c10d::TCPStore rendezvous on host:port and a ProcessGroupGloo over TCP.
// Blocks until every rank has joined; throws RankFailure naming the address
// and the timeout when they do not. size 1 returns single_rank().
std::shared_ptr<RankGroup> join_gloo_group(const RankGroupOptions& options);

}  // namespace sao::algo
