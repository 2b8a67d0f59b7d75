// Weights from the learner's GPU to rollout GPUs (other devices or nodes)
// by NCCL broadcast, in size-bounded buckets (bucket_plan.hpp). CAF carries
// only the control: the 128-byte NCCL unique id, ranks, the version and the
// index; the bytes go GPU to GPU over NVLink, PCIe or the network.
//
// Compiled only with -DSAO_WITH_CUDA=ON (sao_gpu).
#pragma once

#include "gpu/bucket_plan.hpp"
#include "model/safetensors.hpp"
#include "model/tensor_blob.hpp"

#include <array>
#include <cstdint>
#include <string>

namespace sao::gpu {

using NcclUniqueId = std::array<char, 128>;

// A fresh id; rank 0 makes it and every rank passes it to NcclGroup.
NcclUniqueId new_nccl_unique_id();

// One NCCL communicator on one device, with its own CUDA stream.
class NcclGroup {
 public:
  // Blocks until all `ranks` ranks have joined with the same id. Throws
  // sao::Error with NCCL's message (two ranks on one GPU are refused).
  NcclGroup(const NcclUniqueId& id, int rank, int ranks, const torch::Device& device);
  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  int rank() const { return rank_; }
  int ranks() const { return ranks_; }

  // Broadcasts one version of the weights from `root`. The root passes its
  // packed buffer as `source`; every rank (the root too, when it has a
  // replica to fill) passes the module to load into as `target`, or null.
  // `index`/`total_bytes` describe the packed layout (the same on every
  // rank: the learner sends it with the version). Each rank stages one
  // bucket of at most `max_bucket_bytes` at a time, then copies its pieces
  // into the target's tensors. Returns when this rank's copies are done.
  // Throws sao::Error naming `where` for an index that does not match the
  // target, before any byte moves.
  void broadcast(int root, const model::DevicePackedTensors* source, torch::nn::Module* target,
                 const std::vector<model::PackedTensor>& index, uint64_t total_bytes, uint64_t max_bucket_bytes,
                 const std::string& where);

 private:
  void* comm_ = nullptr;    // ncclComm_t
  void* stream_ = nullptr;  // cudaStream_t
  int rank_ = 0;
  int ranks_ = 0;
  int device_ = 0;
};

}  // namespace sao::gpu
