// CUDA IPC weight transport; see cuda_ipc.hpp.
#include "gpu/cuda_ipc.hpp"

#include "base/error.hpp"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>

namespace sao::gpu {

namespace {

void check(cudaError_t status, const std::string& what) {
  if (status != cudaSuccess) throw Error(what + ": " + cudaGetErrorString(status));
}

// Makes `device` current for the scope (CUDA's current device is per thread).
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) check(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
  }
  ~DeviceScope() { cudaSetDevice(previous_); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
};

// Sets the current device without throwing, for destructors and deleters.
class QuietDeviceScope {
 public:
  explicit QuietDeviceScope(int device) {
    if (cudaGetDevice(&previous_) == cudaSuccess && previous_ != device) cudaSetDevice(device);
  }
  ~QuietDeviceScope() { cudaSetDevice(previous_); }
  QuietDeviceScope(const QuietDeviceScope&) = delete;
  QuietDeviceScope& operator=(const QuietDeviceScope&) = delete;

 private:
  int previous_ = 0;
};

// The allocations made by pack_module_for_ipc: only these are the base of
// their own allocation, which an IPC handle must name (CUDA maps a handle
// from its allocation's base, so a caching-allocator block would be read
// from the wrong address).
std::mutex& exported_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::set<const void*>& exported_bases() {
  static std::set<const void*> bases;
  return bases;
}

int index_of(const torch::Device& device) {
  if (!device.is_cuda()) throw Error("CUDA IPC needs a cuda device, got " + device.str());
  return device.has_index() ? device.index() : 0;
}

}  // namespace

std::string cuda_device_uuid(int device) {
  cudaDeviceProp properties{};
  check(cudaGetDeviceProperties(&properties, device), "cudaGetDeviceProperties(" + std::to_string(device) + ")");
  std::string text = "GPU-";
  char byte[3];
  for (int i = 0; i < 16; ++i) {
    std::snprintf(byte, sizeof byte, "%02x", static_cast<unsigned char>(properties.uuid.bytes[i]));
    text += byte;
    if (i == 3 || i == 5 || i == 7 || i == 9) text += '-';
  }
  return text;
}

model::DevicePackedTensors pack_module_for_ipc(const torch::nn::Module& module, const torch::Device& device) {
  const int index = index_of(device);
  const auto tensors = model::named_tensors_of(module);
  model::DevicePackedTensors packed;
  uint64_t total = 0;
  packed.index = model::packed_index_of(tensors, &total);
  void* pointer = nullptr;
  {
    DeviceScope scope(index);
    // Its own cudaMalloc, not the caching allocator's: an IPC handle names
    // a whole allocation, and the importer maps it from its base.
    check(cudaMalloc(&pointer, total > 0 ? total : 1), "cudaMalloc(" + std::to_string(total) + " bytes)");
  }
  {
    std::lock_guard<std::mutex> lock(exported_mutex());
    exported_bases().insert(pointer);
  }
  packed.buffer = torch::from_blob(
      pointer, {static_cast<int64_t>(total)},
      [index](void* p) {
        {
          std::lock_guard<std::mutex> lock(exported_mutex());
          exported_bases().erase(p);
        }
        QuietDeviceScope scope(index);
        cudaFree(p);
      },
      torch::dtype(torch::kUInt8).device(torch::kCUDA, static_cast<c10::DeviceIndex>(index)));
  model::pack_into(tensors, packed.index, packed.buffer);
  DeviceScope scope(index);
  check(cudaDeviceSynchronize(), "waiting for the weights to be packed");
  return packed;
}

IpcHandle export_ipc_handle(const model::DevicePackedTensors& packed) {
  if (!packed.buffer.defined() || !packed.buffer.is_cuda()) throw Error("CUDA IPC: the weights are not on a GPU");
  const int index = packed.buffer.device().index();
  {
    std::lock_guard<std::mutex> lock(exported_mutex());
    if (exported_bases().count(packed.buffer.data_ptr()) == 0) {
      throw Error("CUDA IPC: the buffer was not made by pack_module_for_ipc (only its own allocations can be shared)");
    }
  }
  DeviceScope scope(index);
  IpcHandle handle;
  cudaIpcMemHandle_t raw{};
  check(cudaIpcGetMemHandle(&raw, packed.buffer.data_ptr()), "cudaIpcGetMemHandle");
  std::memcpy(handle.bytes.data(), &raw, sizeof raw);
  handle.size = static_cast<uint64_t>(packed.buffer.numel());
  handle.device_uuid = cuda_device_uuid(index);
  return handle;
}

IpcImport::IpcImport(const IpcHandle& handle, const std::vector<model::PackedTensor>& index,
                     const torch::Device& device)
    : device_(index_of(device)) {
  const auto uuid = cuda_device_uuid(device_);
  if (uuid != handle.device_uuid) {
    throw Error("CUDA IPC: the weights are on " + handle.device_uuid + ", this process runs on " + uuid +
                " (CUDA IPC works within one GPU; use NCCL across GPUs)");
  }
  cudaIpcMemHandle_t raw{};
  std::memcpy(&raw, handle.bytes.data(), sizeof raw);
  DeviceScope scope(device_);
  check(cudaIpcOpenMemHandle(&pointer_, raw, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle");
  packed_.index = index;
  packed_.buffer =
      torch::from_blob(pointer_, {static_cast<int64_t>(handle.size)},
                       torch::dtype(torch::kUInt8).device(torch::kCUDA, static_cast<c10::DeviceIndex>(device_)));
}

IpcImport::~IpcImport() {
  if (pointer_ == nullptr) return;
  QuietDeviceScope scope(device_);
  // Copies out of the mapping are queued on the device; they must finish
  // before the mapping goes.
  cudaDeviceSynchronize();
  cudaIpcCloseMemHandle(pointer_);
}

}  // namespace sao::gpu
