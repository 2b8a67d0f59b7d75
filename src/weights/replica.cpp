// bf16 versions for low-precision replicas; see replica.hpp.
#include "weights/replica.hpp"

#include "base/allocator.hpp"
#include "base/error.hpp"
#include "model/safetensors.hpp"
#include "weights/checksum.hpp"

#include <cstring>

namespace sao::weights {

namespace {

// The packed tensors of `buffer` (a uint8 vector holding `index`), each as
// a view converted to BF16 where it is F32.
std::vector<std::pair<std::string, torch::Tensor>> converted_views(const std::vector<model::PackedTensor>& index,
                                                                   const torch::Tensor& buffer) {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  const auto size = static_cast<uint64_t>(buffer.numel());
  for (const auto& entry : index) {
    const auto type = model::scalar_type_from_safetensors_name(entry.dtype);
    if (!type) throw Error("bf16 version: tensor '" + entry.name + "' has unknown dtype \"" + entry.dtype + "\"");
    if (entry.offset > size || entry.size > size - entry.offset) {
      throw Error("bf16 version: tensor '" + entry.name + "' lies outside the buffer");
    }
    auto view = buffer.narrow(0, static_cast<int64_t>(entry.offset), static_cast<int64_t>(entry.size))
                    .view(*type)
                    .view(entry.shape);
    tensors.emplace_back(entry.name, *type == torch::kFloat32 ? view.to(torch::kBFloat16) : view);
  }
  return tensors;
}

}  // namespace

Packet bf16_packet(const Packet& source) {
  Packet packet;
  packet.version = source.version;
  if (source.on_device) {
    const auto& on_device = *source.on_device;
    const auto tensors = converted_views(on_device.index, on_device.buffer);
    auto packed = std::make_shared<model::DevicePackedTensors>();
    uint64_t total = 0;
    packed->index = model::packed_index_of(tensors, &total);
    packed->buffer = torch::empty({static_cast<int64_t>(total)}, on_device.buffer.options());
    model::pack_into(tensors, packed->index, packed->buffer);
    return device_packet(source.version, std::move(packed));
  }
  if (source.tensors.bytes.empty()) {
    throw Error(std::string("bf16 version: a ") + route_name(source.route) + " packet carries no tensors to convert");
  }
  auto& bytes = const_cast<std::vector<char>&>(source.tensors.bytes);  // only read, through the views
  const auto buffer = torch::from_blob(bytes.data(), {static_cast<int64_t>(bytes.size())}, torch::kUInt8);
  const auto tensors = converted_views(source.tensors.index, buffer);
  model::PackedTensors packed;
  uint64_t total = 0;
  packed.index = model::packed_index_of(tensors, &total);
  packed.bytes = base::make_bulk_buffer(total);
  auto target = torch::from_blob(packed.bytes.data(), {static_cast<int64_t>(total)}, torch::kUInt8);
  model::pack_into(tensors, packed.index, target);
  return host_packet(source.version, std::move(packed));
}

bool is_bf16_version(const Packet& packet) {
  const auto& index = index_of(packet);
  for (const auto& entry : index) {
    if (entry.dtype == "F32" || entry.dtype == "F16" || entry.dtype == "F64") return false;
  }
  return !index.empty();
}

Bf16Image image_of_packet(const Packet& bf16_version) {
  if (bf16_version.on_device) {
    return bf16_image(model::download(*bf16_version.on_device), bf16_version.version);
  }
  return bf16_image(bf16_version.tensors, bf16_version.version);
}

Bf16Image image_of_module(const torch::nn::Module& module, const std::vector<model::PackedTensor>& index,
                          int64_t version) {
  const auto tensors = module_tensors(module, index, "bf16 replica");
  Bf16Image image;
  image.version = version;
  std::vector<torch::Tensor> hosts;
  uint64_t total = 0;
  for (size_t i = 0; i < index.size(); ++i) {
    if (tensors[i].scalar_type() != torch::kBFloat16) {
      throw Error("bf16 replica: tensor '" + index[i].name + "' is " +
                  model::safetensors_dtype_name(tensors[i].scalar_type()) + ", not BF16 (rollout.weights_dtype)");
    }
    hosts.push_back(tensors[i].detach().to(torch::kCPU).contiguous());
    total += static_cast<uint64_t>(hosts.back().numel());
  }
  image.values.resize(static_cast<size_t>(total));
  size_t at = 0;
  for (const auto& host : hosts) {
    std::memcpy(image.values.data() + at, host.data_ptr(), static_cast<size_t>(host.numel()) * sizeof(uint16_t));
    at += static_cast<size_t>(host.numel());
  }
  return image;
}

void load_image_into_module(const Bf16Image& image, const std::vector<model::PackedTensor>& index,
                            torch::nn::Module& module, const std::string& where) {
  auto targets = module_tensors(module, index, where);
  uint64_t total = 0;
  for (size_t i = 0; i < index.size(); ++i) {
    const auto bytes = static_cast<uint64_t>(targets[i].numel()) * sizeof(uint16_t);
    if (targets[i].scalar_type() != torch::kBFloat16 || bytes != index[i].size) {
      throw Error(where + ": tensor '" + index[i].name + "' is not a BF16 tensor of " + std::to_string(index[i].size) +
                  " bytes in this model");
    }
    total += static_cast<uint64_t>(targets[i].numel());
  }
  if (total != image.values.size()) {
    throw Error(where + ": an image of " + std::to_string(image.values.size()) + " elements for tensors of " +
                std::to_string(total));
  }
  torch::NoGradGuard no_grad;
  size_t at = 0;
  for (auto& target : targets) {
    auto source = torch::from_blob(const_cast<uint16_t*>(image.values.data() + at), target.sizes(), torch::kBFloat16);
    target.copy_(source);
    at += static_cast<size_t>(target.numel());
  }
}

}  // namespace sao::weights
