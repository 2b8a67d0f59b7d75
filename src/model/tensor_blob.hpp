// Tensors as plain bytes + dtype + shape, so weights can travel in messages
// (between actors, between processes) without the receiver sharing memory
// with the sender.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace sao::model {

struct TensorBlob {
  std::string name;            // parameter name, e.g. "model.norm.weight"
  std::string dtype;           // safetensors dtype name: "F32", "BF16", "I64", ...
  std::vector<int64_t> shape;  // row-major
  std::vector<char> data;      // little-endian, contiguous
};

TensorBlob to_blob(const std::string& name, const torch::Tensor& tensor);
// Throws sao::Error naming the blob when dtype or byte count is inconsistent.
torch::Tensor from_blob(const TensorBlob& blob);
// Every parameter and buffer of the module.
std::vector<TensorBlob> module_to_blobs(const torch::nn::Module& module);
// Copies blobs into the module's parameters. Validates every blob (name known,
// shape and dtype match) before copying anything, so a bad message leaves the
// module unchanged. Throws sao::Error naming `where` and the tensor.
void load_blobs_into_module(torch::nn::Module& module, const std::vector<TensorBlob>& blobs, const std::string& where);

}  // namespace sao::model
