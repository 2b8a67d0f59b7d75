// NCCL weight broadcast; see nccl_broadcast.hpp.
#include "gpu/nccl_broadcast.hpp"

#include "base/error.hpp"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <map>

namespace sao::gpu {

namespace {

void check_cuda(cudaError_t status, const std::string& what) {
  if (status != cudaSuccess) throw Error(what + ": " + cudaGetErrorString(status));
}

void check_nccl(ncclResult_t status, const std::string& what) {
  if (status != ncclSuccess) throw Error(what + ": " + ncclGetErrorString(status));
}

class NcclDeviceScope {
 public:
  explicit NcclDeviceScope(int device) {
    cudaGetDevice(&previous_);
    if (previous_ != device) check_cuda(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
  }
  ~NcclDeviceScope() { cudaSetDevice(previous_); }
  NcclDeviceScope(const NcclDeviceScope&) = delete;
  NcclDeviceScope& operator=(const NcclDeviceScope&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace

NcclUniqueId new_nccl_unique_id() {
  ncclUniqueId raw{};
  check_nccl(ncclGetUniqueId(&raw), "ncclGetUniqueId");
  static_assert(sizeof raw == sizeof(NcclUniqueId), "NCCL's unique id is 128 bytes");
  NcclUniqueId id{};
  std::memcpy(id.data(), &raw, sizeof raw);
  return id;
}

NcclGroup::NcclGroup(const NcclUniqueId& id, int rank, int ranks, const torch::Device& device)
    : rank_(rank), ranks_(ranks) {
  if (!device.is_cuda()) throw Error("NCCL needs a cuda device, got " + device.str());
  if (ranks < 1 || rank < 0 || rank >= ranks) {
    throw Error("NCCL: rank " + std::to_string(rank) + " of " + std::to_string(ranks) + " ranks");
  }
  device_ = device.has_index() ? device.index() : 0;
  NcclDeviceScope scope(device_);
  ncclUniqueId raw{};
  std::memcpy(&raw, id.data(), sizeof raw);
  ncclComm_t comm = nullptr;
  check_nccl(ncclCommInitRank(&comm, ranks, raw, rank),
             "ncclCommInitRank(rank " + std::to_string(rank) + " of " + std::to_string(ranks) + ")");
  comm_ = comm;
  cudaStream_t stream = nullptr;
  const auto status = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (status != cudaSuccess) {
    ncclCommDestroy(comm);
    check_cuda(status, "cudaStreamCreate");
  }
  stream_ = stream;
}

NcclGroup::~NcclGroup() {
  NcclDeviceScope scope(device_);
  if (stream_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  if (comm_ != nullptr) ncclCommDestroy(static_cast<ncclComm_t>(comm_));
}

void NcclGroup::broadcast(int root, const model::DevicePackedTensors* source, torch::nn::Module* target,
                          const std::vector<model::PackedTensor>& index, uint64_t total_bytes,
                          uint64_t max_bucket_bytes, const std::string& where) {
  if (root < 0 || root >= ranks_) throw Error(where + ": root rank " + std::to_string(root) + " does not exist");
  if (rank_ == root && (source == nullptr || static_cast<uint64_t>(source->buffer.numel()) != total_bytes ||
                        !source->buffer.is_cuda())) {
    throw Error(where + ": the root must pass its packed weights on its GPU (" + std::to_string(total_bytes) +
                " bytes)");
  }
  // Validate the index against the target before any byte moves, as a
  // host message would be (every name, dtype and shape).
  std::vector<torch::Tensor> tensors(index.size());
  if (target != nullptr) {
    std::map<std::string, torch::Tensor> by_name;
    for (const auto& [name, tensor] : model::named_tensors_of(*target)) by_name[name] = tensor;
    for (size_t i = 0; i < index.size(); ++i) {
      auto it = by_name.find(index[i].name);
      if (it == by_name.end()) throw Error(where + ": tensor '" + index[i].name + "' is not a parameter of this model");
      if (!it->second.is_cuda() || !it->second.is_contiguous()) {
        throw Error(where + ": tensor '" + index[i].name + "' must be a contiguous tensor on the GPU");
      }
      if (static_cast<uint64_t>(it->second.numel()) * it->second.element_size() != index[i].size) {
        throw Error(where + ": tensor '" + index[i].name + "' has " +
                    std::to_string(it->second.numel() * it->second.element_size()) + " bytes, the index says " +
                    std::to_string(index[i].size));
      }
      tensors[i] = it->second;
    }
  }
  const auto buckets = plan_buckets(index, total_bytes, max_bucket_bytes);
  NcclDeviceScope scope(device_);
  auto stream = static_cast<cudaStream_t>(stream_);
  auto comm = static_cast<ncclComm_t>(comm_);
  uint64_t largest = 0;
  for (const auto& bucket : buckets) largest = std::max(largest, bucket.size);
  auto staging = torch::empty({static_cast<int64_t>(std::max<uint64_t>(largest, 1))},
                              torch::dtype(torch::kUInt8).device(torch::kCUDA, static_cast<c10::DeviceIndex>(device_)));
  // The root's packing (on LibTorch's stream) must be complete before NCCL
  // reads it on this one.
  check_cuda(cudaDeviceSynchronize(), where + ": waiting for the packed weights");
  torch::NoGradGuard no_grad;
  for (const auto& bucket : buckets) {
    const void* send = rank_ == root ? static_cast<const char*>(source->buffer.data_ptr()) + bucket.offset : nullptr;
    check_nccl(ncclBroadcast(send, staging.data_ptr(), bucket.size, ncclUint8, root, comm, stream),
               where + ": ncclBroadcast of bytes " + std::to_string(bucket.offset) + "+" + std::to_string(bucket.size));
    check_cuda(cudaStreamSynchronize(stream), where + ": broadcast");
    if (target == nullptr) continue;
    for (const auto& piece : pieces_in(index, bucket)) {
      auto bytes = tensors[piece.tensor].view({-1}).view(torch::kUInt8);
      bytes.narrow(0, static_cast<int64_t>(piece.tensor_offset), static_cast<int64_t>(piece.size))
          .copy_(staging.narrow(0, static_cast<int64_t>(piece.bucket_offset), static_cast<int64_t>(piece.size)));
    }
    // The staging buffer is reused by the next bucket: its copies must be done.
    check_cuda(cudaDeviceSynchronize(), where + ": copying a bucket into the weights");
  }
}

}  // namespace sao::gpu
