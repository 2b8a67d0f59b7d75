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
// leaves the module unchanged. Throws sao::Error naming `where` and the tensor.
void load_packed_into_module(torch::nn::Module& module, const PackedTensors& packed, const std::string& where);

}  // namespace sao::model
