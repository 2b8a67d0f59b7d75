// Tensor <-> bytes; see tensor_blob.hpp.
#include "model/tensor_blob.hpp"

#include "model/safetensors.hpp"
#include "base/error.hpp"

#include <cstring>
#include <map>

namespace sao::model {

TensorBlob to_blob(const std::string& name, const torch::Tensor& tensor) {
  auto contiguous = tensor.detach().to(torch::kCPU).contiguous();
  TensorBlob blob;
  blob.name = name;
  blob.dtype = safetensors_dtype_name(contiguous.scalar_type());
  blob.shape.assign(contiguous.sizes().begin(), contiguous.sizes().end());
  const auto bytes = static_cast<size_t>(contiguous.numel()) * contiguous.element_size();
  blob.data.resize(bytes);
  if (bytes > 0) std::memcpy(blob.data.data(), contiguous.data_ptr(), bytes);
  return blob;
}

torch::Tensor from_blob(const TensorBlob& blob) {
  const auto type = scalar_type_from_safetensors_name(blob.dtype);
  if (!type) throw Error("tensor '" + blob.name + "': unknown dtype \"" + blob.dtype + "\"");
  auto tensor = torch::empty(blob.shape, torch::TensorOptions().dtype(*type));
  const auto bytes = static_cast<size_t>(tensor.numel()) * tensor.element_size();
  if (bytes != blob.data.size()) {
    throw Error("tensor '" + blob.name + "': " + std::to_string(blob.data.size()) + " bytes for a shape that needs " +
                std::to_string(bytes));
  }
  if (bytes > 0) std::memcpy(tensor.data_ptr(), blob.data.data(), bytes);
  return tensor;
}

std::vector<TensorBlob> module_to_blobs(const torch::nn::Module& module) {
  std::vector<TensorBlob> blobs;
  for (const auto& [name, tensor] : named_tensors_of(module)) blobs.push_back(to_blob(name, tensor));
  return blobs;
}

void load_blobs_into_module(torch::nn::Module& module, const std::vector<TensorBlob>& blobs, const std::string& where) {
  std::map<std::string, torch::Tensor> targets;
  for (const auto& [name, tensor] : named_tensors_of(module)) targets[name] = tensor;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;
  for (const auto& blob : blobs) {
    auto it = targets.find(blob.name);
    if (it == targets.end()) throw Error(where + ": tensor '" + blob.name + "' is not a parameter of this model");
    torch::Tensor source;
    try {
      source = from_blob(blob);
    } catch (const Error& error) {
      throw Error(where + ": " + error.what());
    }
    if (source.sizes() != it->second.sizes() || source.scalar_type() != it->second.scalar_type()) {
      throw Error(where + ": tensor '" + blob.name + "' has shape/dtype that does not match the model");
    }
    copies.emplace_back(it->second, std::move(source));
    targets.erase(it);
  }
  if (!targets.empty()) throw Error(where + ": tensor '" + targets.begin()->first + "' is missing");
  torch::NoGradGuard no_grad;
  for (auto& [target, source] : copies) target.copy_(source);
}

}  // namespace sao::model
