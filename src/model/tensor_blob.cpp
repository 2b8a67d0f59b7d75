// Packed tensors <-> module; see tensor_blob.hpp.
#include "model/tensor_blob.hpp"

#include "model/lora_config.hpp"

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
torch::ScalarType checked_type(uint64_t buffer_size, const PackedTensor& entry) {
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
  if (entry.offset > buffer_size || entry.size > buffer_size - entry.offset) {
    throw Error("tensor '" + entry.name + "': bytes " + std::to_string(entry.offset) + "+" +
                std::to_string(entry.size) + " lie outside the " + std::to_string(buffer_size) + "-byte buffer");
  }
  return *type;
}

// Pairs every index entry with the module tensor of its name, after
// checking the whole index (names known and present once, dtype, shape,
// bytes inside the buffer), so a bad message leaves the module unchanged.
std::vector<std::pair<torch::Tensor, const PackedTensor*>> match_index(torch::nn::Module& module,
                                                                       const std::vector<PackedTensor>& index,
                                                                       uint64_t buffer_size, const std::string& where) {
  std::map<std::string, torch::Tensor> targets;
  for (const auto& [name, tensor] : named_tensors_of(module)) targets[name] = tensor;
  std::vector<std::pair<torch::Tensor, const PackedTensor*>> copies;
  copies.reserve(index.size());
  for (const auto& entry : index) {
    auto it = targets.find(entry.name);
    if (it == targets.end()) {
      const bool seen =
          std::any_of(copies.begin(), copies.end(), [&](const auto& copy) { return copy.second->name == entry.name; });
      throw Error(where + ": tensor '" + entry.name + "' " +
                  (seen ? "appears twice" : "is not a parameter of this model"));
    }
    torch::ScalarType type;
    try {
      type = checked_type(buffer_size, entry);
    } catch (const Error& error) {
      throw Error(where + ": " + error.what());
    }
    if (it->second.sizes() != c10::IntArrayRef(entry.shape) || it->second.scalar_type() != type) {
      throw Error(where + ": tensor '" + entry.name + "' has shape/dtype that does not match the model");
    }
    copies.emplace_back(it->second, &entry);
    targets.erase(it);
  }
  // A LoRA policy's versions after the first carry its adapters only (the
  // base is frozen): exactly every adapter tensor, nothing else, is whole too.
  const bool adapters_only = !copies.empty() && std::all_of(copies.begin(), copies.end(), [](const auto& copy) {
    return is_lora_tensor_name(copy.second->name);
  });
  for (const auto& [name, tensor] : targets) {
    if (!adapters_only || is_lora_tensor_name(name)) throw Error(where + ": tensor '" + name + "' is missing");
  }
  return copies;
}

// Entry `entry` of a uint8 buffer seen as its tensor (a view, no copy).
torch::Tensor view_in(const torch::Tensor& buffer, const PackedTensor& entry, torch::ScalarType type) {
  return buffer.narrow(0, static_cast<int64_t>(entry.offset), static_cast<int64_t>(entry.size))
      .view(type)
      .view(entry.shape);
}

}  // namespace

PackedTensors pack_tensors(const std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
  PackedTensors packed;
  std::vector<torch::Tensor> sources;
  for (const auto& item : tensors) sources.push_back(item.second.detach().to(torch::kCPU).contiguous());
  uint64_t end = 0;
  packed.index = packed_index_of(tensors, &end);
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
  const auto type = checked_type(packed.bytes.size(), entry);
  auto tensor = torch::empty(entry.shape, torch::TensorOptions().dtype(type));
  if (entry.size > 0) std::memcpy(tensor.data_ptr(), packed.bytes.data() + entry.offset, entry.size);
  return tensor;
}

void load_packed_into_module(torch::nn::Module& module, const PackedTensors& packed, const std::string& where) {
  load_packed_into_module(module, packed.index, packed.bytes.data(), packed.bytes.size(), where);
}

void load_packed_into_module(torch::nn::Module& module, const std::vector<PackedTensor>& index, const char* bytes,
                             uint64_t size, const std::string& where) {
  const auto copies = match_index(module, index, size, where);
  torch::NoGradGuard no_grad;
  for (const auto& [target, entry] : copies) {
    if (entry->size == 0) continue;
    const char* source = bytes + entry->offset;
    if (target.device().is_cpu() && target.is_contiguous()) {
      std::memcpy(target.data_ptr(), source, entry->size);
    } else {
      // A view of the received bytes, only read by copy_. The copy to a GPU
      // is synchronous from pageable memory, so the bytes may go afterwards.
      auto mutable_target = target;
      mutable_target.copy_(torch::from_blob(const_cast<char*>(source), entry->shape, target.scalar_type()));
    }
  }
}

std::vector<PackedTensor> packed_index_of(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                                          uint64_t* total_bytes) {
  std::vector<PackedTensor> index;
  uint64_t end = 0;
  for (const auto& [name, tensor] : tensors) {
    PackedTensor entry;
    entry.name = name;
    entry.dtype = safetensors_dtype_name(tensor.scalar_type());
    entry.shape.assign(tensor.sizes().begin(), tensor.sizes().end());
    entry.offset = aligned(end);
    entry.size = static_cast<uint64_t>(tensor.numel()) * tensor.element_size();
    end = entry.offset + entry.size;
    index.push_back(std::move(entry));
  }
  if (total_bytes != nullptr) *total_bytes = end;
  return index;
}

void pack_into(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
               const std::vector<PackedTensor>& index, torch::Tensor& buffer) {
  if (tensors.size() != index.size())
    throw Error("pack_into: " + std::to_string(tensors.size()) + " tensors for an index of " +
                std::to_string(index.size()));
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& entry = index[i];
    if (entry.size == 0) continue;
    const auto type = checked_type(static_cast<uint64_t>(buffer.numel()), entry);
    view_in(buffer, entry, type).copy_(tensors[i].second.detach());
  }
}

DevicePackedTensors pack_module_on_device(const torch::nn::Module& module, const torch::Device& device) {
  const auto tensors = named_tensors_of(module);
  DevicePackedTensors packed;
  uint64_t total = 0;
  packed.index = packed_index_of(tensors, &total);
  packed.buffer = torch::empty({static_cast<int64_t>(total)}, torch::dtype(torch::kUInt8).device(device));
  pack_into(tensors, packed.index, packed.buffer);
  return packed;
}

void load_device_packed_into_module(torch::nn::Module& module, const DevicePackedTensors& packed,
                                    const std::string& where) {
  if (!packed.buffer.defined() || packed.buffer.scalar_type() != torch::kUInt8 || packed.buffer.dim() != 1 ||
      !packed.buffer.is_contiguous()) {
    throw Error(where + ": the device buffer is not a contiguous uint8 vector");
  }
  const auto copies = match_index(module, packed.index, static_cast<uint64_t>(packed.buffer.numel()), where);
  torch::NoGradGuard no_grad;
  for (const auto& [target, entry] : copies) {
    if (entry->size == 0) continue;
    auto mutable_target = target;
    mutable_target.copy_(view_in(packed.buffer, *entry, target.scalar_type()));
  }
}

PackedTensors download(const DevicePackedTensors& packed) {
  PackedTensors host;
  host.index = packed.index;
  host.bytes = base::make_bulk_buffer(static_cast<uint64_t>(packed.buffer.numel()));
  if (!host.bytes.empty()) {
    torch::from_blob(host.bytes.data(), {packed.buffer.numel()}, torch::kUInt8).copy_(packed.buffer);
  }
  return host;
}

}  // namespace sao::model
