// A module's tensors packed into one contiguous byte buffer with an index
// (name, dtype, shape, offset), so weights can travel in messages (between
// actors, between processes) without the receiver sharing memory with the
// sender. Packing allocates once; a message carrying the buffer is
// serialised as one raw block; loading validates the whole index, then
// copies each tensor straight into the receiving model's own storage.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace sao::model {

// Where one tensor lies in PackedTensors::bytes.
struct PackedTensor {
  std::string name;            // parameter name, e.g. "model.norm.weight"
  std::string dtype;           // safetensors dtype name: "F32", "BF16", "I64", ...
  std::vector<int64_t> shape;  // row-major
  uint64_t offset = 0;         // first byte, a multiple of kPackedAlignment
  uint64_t size = 0;           // bytes, little-endian, contiguous
};

struct PackedTensors {
  std::vector<PackedTensor> index;
  std::vector<char> bytes;
};

// The same layout in one buffer on a device (a uint8 tensor, e.g. on a
// GPU): the weights of one version, packed by the learner without a host
// round trip, read by rollouts of the same process with device-to-device
// copies, and the buffer a CUDA IPC handle or an NCCL broadcast carries.
// Immutable once made: a new version is a new buffer.
struct DevicePackedTensors {
  std::vector<PackedTensor> index;
  torch::Tensor buffer;  // uint8 [total bytes], contiguous
};

// Offsets are aligned so a tensor's bytes can be read as its element type
// (and by vector loads) in place.
constexpr uint64_t kPackedAlignment = 64;

PackedTensors pack_tensors(const std::vector<std::pair<std::string, torch::Tensor>>& tensors);
// Every parameter and buffer of the module.
PackedTensors pack_module(const torch::nn::Module& module);
// A copy of entry `position` as a fresh tensor. Throws sao::Error naming the
// tensor when its dtype, size or place in the buffer is inconsistent.
torch::Tensor unpack_tensor(const PackedTensors& packed, size_t position);
// Copies the packed tensors into the module's parameters and buffers.
// Validates the whole index first (every name known and present once, shape
// and dtype equal to the module's, bytes inside the buffer), so a bad message
// leaves the module unchanged. Every module tensor must be there, or, for a
// LoRA policy, exactly its adapters (a version after the first: the base is
// frozen). Throws sao::Error naming `where` and the tensor.
void load_packed_into_module(torch::nn::Module& module, const PackedTensors& packed, const std::string& where);
// The same for an index and bytes held apart (a buffer the rollouts of one
// process share).
void load_packed_into_module(torch::nn::Module& module, const std::vector<PackedTensor>& index, const char* bytes,
                             uint64_t size, const std::string& where);

// Every parameter and buffer of the module packed into one fresh buffer on
// `device` (the layout of pack_module: same index, same offsets).
DevicePackedTensors pack_module_on_device(const torch::nn::Module& module, const torch::Device& device);
// Lays out tensors in `index` order (offsets aligned as pack_tensors does)
// into `buffer` (uint8, contiguous, large enough), by device copies.
void pack_into(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
               const std::vector<PackedTensor>& index, torch::Tensor& buffer);
// The index pack_tensors would make for these tensors, and its total bytes.
std::vector<PackedTensor> packed_index_of(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                                          uint64_t* total_bytes);
// Copies from the device buffer into the module's parameters and buffers,
// wherever they live (device to device when both are on the GPU). Validates
// the whole index first, as load_packed_into_module does.
void load_device_packed_into_module(torch::nn::Module& module, const DevicePackedTensors& packed,
                                    const std::string& where);
// The host copy of a device pack (for a receiver in another process).
PackedTensors download(const DevicePackedTensors& packed);

}  // namespace sao::model
