// AdamW over one model's trainable parameters, replicated or sharded over
// the learner ranks (ZeRO stage 1). Sharded, each rank keeps the moments of
// the parameters it owns (about 1/N of the bytes), steps only those, and
// each owner then broadcasts its updated parameters, so every rank ends the
// step with the same weights as the replicated optimizer would give. The
// gradients are still summed on every rank (Gloo has no reduce-scatter for
// CPU tensors in LibTorch 1.13); what ZeRO-1 saves here is optimizer memory.
//
// Checkpoints stay one complete state, whatever N wrote them: save gathers
// the shards into one AdamW on rank 0; load reads one on rank 0 and
// share_from hands each owner its part.
#pragma once

#include "algo/rank_group.hpp"

#include <torch/optim/adamw.h>

#include <memory>
#include <string>
#include <vector>

namespace sao::algo {

class ShardedAdamW {
 public:
  // shard: ZeRO-1 when the group has more than one rank (otherwise ignored).
  ShardedAdamW(std::vector<torch::Tensor> params, const torch::optim::AdamWOptions& options,
               std::shared_ptr<RankGroup> ranks, bool shard);

  bool sharded() const { return sharded_; }
  const std::vector<torch::Tensor>& params() const { return params_; }
  // The rank that steps params()[i].
  int owner(size_t i) const { return owners_[i]; }
  // The AdamW this rank steps (over every parameter, or its own share).
  torch::optim::AdamW& local() { return *local_; }

  void zero_grad();  // every parameter's gradient, owned or not
  // Steps this rank's parameters; sharded, each owner then broadcasts its
  // (a collective: every rank calls it).
  void step();
  void set_lr(double lr);
  // Bytes of moment tensors this rank holds.
  int64_t state_bytes();

  // Collectives (every rank calls them):
  // Every rank's state becomes what rank `root` holds: replicated, its
  // AdamW; sharded, the complete state load() read on root (or, when none
  // was read, an empty one).
  void share_from(int root);
  // Rank `root` writes one complete AdamW state to `path` (other ranks pass
  // any path; they only send their shards).
  void save(const std::string& path, int root);
  // The AdamW a complete saved state (save(), or a replicated learner's
  // checkpoint) is read into: the local one, or, sharded, one over every
  // parameter that share_from(root) then hands out (call it on root only).
  torch::optim::AdamW& load_target();

 private:
  std::unique_ptr<torch::optim::AdamW> make_full() const;

  std::vector<torch::Tensor> params_;
  std::vector<int> owners_;
  torch::optim::AdamWOptions options_;
  std::shared_ptr<RankGroup> ranks_;
  bool sharded_ = false;
  std::unique_ptr<torch::optim::AdamW> local_;
  std::unique_ptr<torch::optim::AdamW> loaded_;  // sharded, on the loading rank: the state read, until shared
};

// Owners for parameters of these sizes over `ranks`: largest first, each to
// the rank with the fewest elements so far (ties: the lower rank).
std::vector<int> plan_parameter_owners(const std::vector<int64_t>& sizes, int ranks);

}  // namespace sao::algo
