// Weights shared between processes on one GPU through CUDA IPC: the learner
// packs its policy into a buffer it allocated with cudaMalloc and sends a
// 64-byte handle (over CAF, or a command line); a rollout process on the
// same GPU opens the handle and copies the weights device to device into
// its own parameters. No byte of the weights crosses the host.
//
// Compiled only with -DSAO_WITH_CUDA=ON (sao_gpu).
#pragma once

#include "gpu/ipc_handle.hpp"
#include "model/safetensors.hpp"
#include "model/tensor_blob.hpp"

#include <array>
#include <cstdint>
#include <string>

namespace sao::gpu {

// UUID of a CUDA device ("GPU-..."), as nvidia-smi prints it.
std::string cuda_device_uuid(int device);

// Packs the module into a fresh cudaMalloc buffer on `device` (freed when
// the last reference to the buffer tensor goes) and waits for the copies,
// so the buffer is complete before anyone opens it.
model::DevicePackedTensors pack_module_for_ipc(const torch::nn::Module& module, const torch::Device& device);

// The handle of a buffer made by pack_module_for_ipc. Throws sao::Error for
// any other buffer (a caching-allocator block is not its allocation's base).
IpcHandle export_ipc_handle(const model::DevicePackedTensors& packed);

// An opened handle: `packed.buffer` views the exporter's memory until this
// object is destroyed (cudaIpcCloseMemHandle). Throws sao::Error when the
// handle is from another GPU, or CUDA refuses it (same process, gone).
class IpcImport {
 public:
  IpcImport(const IpcHandle& handle, const std::vector<model::PackedTensor>& index, const torch::Device& device);
  ~IpcImport();
  IpcImport(const IpcImport&) = delete;
  IpcImport& operator=(const IpcImport&) = delete;
  const model::DevicePackedTensors& packed() const { return packed_; }

 private:
  void* pointer_ = nullptr;
  int device_ = 0;
  model::DevicePackedTensors packed_;
};

}  // namespace sao::gpu
