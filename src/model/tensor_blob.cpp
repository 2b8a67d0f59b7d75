// Packed tensors <-> module; see tensor_blob.hpp.
#include "model/tensor_blob.hpp"

#include "base/allocator.hpp"
#include "base/error.hpp"
#include "model/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <map>

namespace sao::model {

namespace {

uint64_t aligned(uint64_t offset) {
  return (offset + kPackedAlignment - 1) / kPackedAlignment * kPackedAlignment;
}

// The entry's element type, after checking that its bytes lie inside the
// buffer and match its shape.
torch::ScalarType checked_type(const PackedTensors& packed, const PackedTensor& entry) {
  const auto type = scalar_type_from_safetensors_name(entry.dtype);
  if (!type) throw Error("tensor '" + entry.name + "': unknown dtype \"" + entry.dtype + "\"");
  uint64_t elements = 1;
  for (const auto extent : entry.shape) {
    if (extent < 0) throw Error("tensor '" + entry.name + "': negative extent " + std::to_string(extent));
    const auto width = static_cast<uint64_t>(extent);
    if (width != 0 && elements > UINT64_MAX / width) throw Error("tensor '" + entry.name + "': shape overflows");
    elements *= width;
  }
  const auto element_size = static_cast<uint64_t>(c10::elementSize(*type));
  if (elements > UINT64_MAX / element_size || elements * element_size != entry.size) {
    throw Error("tensor '" + entry.name + "': " + std::to_string(entry.size) + " bytes for a shape that needs " +
                std::to_string(elements * element_size));
  }
  if (entry.offset > packed.bytes.size() || entry.size > packed.bytes.size() - entry.offset) {
    throw Error("tensor '" + entry.name + "': bytes " + std::to_string(entry.offset) + "+" +
                std::to_string(entry.size) + " lie outside the " + std::to_string(packed.bytes.size()) +
                "-byte buffer");
  }
  return *type;
}

}  // namespace

PackedTensors pack_tensors(const std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
  PackedTensors packed;
  std::vector<torch::Tensor> sources;
  uint64_t end = 0;
  for (const auto& [name, tensor] : tensors) {
    auto source = tensor.detach().to(torch::kCPU).contiguous();
    PackedTensor entry;
    entry.name = name;
    entry.dtype = safetensors_dtype_name(source.scalar_type());
    entry.shape.assign(source.sizes().begin(), source.sizes().end());
    entry.offset = aligned(end);
    entry.size = static_cast<uint64_t>(source.numel()) * source.element_size();
    end = entry.offset + entry.size;
    packed.index.push_back(std::move(entry));
    sources.push_back(std::move(source));
  }
  // Sized once: no growth copies.
  packed.bytes = base::make_bulk_buffer(end);
  for (size_t i = 0; i < sources.size(); ++i) {
    if (packed.index[i].size > 0) {
      std::memcpy(packed.bytes.data() + packed.index[i].offset, sources[i].data_ptr(), packed.index[i].size);
    }
  }
  return packed;
}

PackedTensors pack_module(const torch::nn::Module& module) {
  return pack_tensors(named_tensors_of(module));
}

torch::Tensor unpack_tensor(const PackedTensors& packed, size_t position) {
  if (position >= packed.index.size()) {
    throw Error("packed tensors: no entry " + std::to_string(position) + " among " +
                std::to_string(packed.index.size()));
  }
  const auto& entry = packed.index[position];
  const auto type = checked_type(packed, entry);
  auto tensor = torch::empty(entry.shape, torch::TensorOptions().dtype(type));
  if (entry.size > 0) std::memcpy(tensor.data_ptr(), packed.bytes.data() + entry.offset, entry.size);
  return tensor;
}

void load_packed_into_module(torch::nn::Module& module, const PackedTensors& packed, const std::string& where) {
  std::map<std::string, torch::Tensor> targets;
  for (const auto& [name, tensor] : named_tensors_of(module)) targets[name] = tensor;
  std::vector<std::pair<torch::Tensor, const PackedTensor*>> copies;
  copies.reserve(packed.index.size());
  for (const auto& entry : packed.index) {
    auto it = targets.find(entry.name);
    if (it == targets.end()) {
      const bool seen =
          std::any_of(copies.begin(), copies.end(), [&](const auto& copy) { return copy.second->name == entry.name; });
      throw Error(where + ": tensor '" + entry.name + "' " +
                  (seen ? "appears twice" : "is not a parameter of this model"));
    }
    torch::ScalarType type;
    try {
      type = checked_type(packed, entry);
    } catch (const Error& error) {
      throw Error(where + ": " + error.what());
    }
    if (it->second.sizes() != c10::IntArrayRef(entry.shape) || it->second.scalar_type() != type) {
      throw Error(where + ": tensor '" + entry.name + "' has shape/dtype that does not match the model");
    }
    copies.emplace_back(it->second, &entry);
    targets.erase(it);
  }
  if (!targets.empty()) throw Error(where + ": tensor '" + targets.begin()->first + "' is missing");
  torch::NoGradGuard no_grad;
  for (auto& [target, entry] : copies) {
    if (entry->size == 0) continue;
    const char* source = packed.bytes.data() + entry->offset;
    if (target.device().is_cpu() && target.is_contiguous()) {
      std::memcpy(target.data_ptr(), source, entry->size);
    } else {
      // A view of the received bytes, only read by copy_.
      target.copy_(torch::from_blob(const_cast<char*>(source), entry->shape, target.scalar_type()));
    }
  }
}

}  // namespace sao::model
