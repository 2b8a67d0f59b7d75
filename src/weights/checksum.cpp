// XXH3 over packed tensors; see checksum.hpp.
#include "weights/checksum.hpp"

#include "base/error.hpp"
#include "model/safetensors.hpp"

#include <xxhash.h>

#include <cstdio>
#include <map>
#include <memory>

namespace sao::weights {

namespace {

// One streaming XXH3 state, freed on every path.
class Hasher {
 public:
  Hasher() : state_(XXH3_createState(), &XXH3_freeState) {
    if (!state_ || XXH3_64bits_reset(state_.get()) != XXH_OK) throw Error("checksum: cannot start an XXH3 state");
  }
  void add(const void* data, size_t size) {
    if (size > 0 && XXH3_64bits_update(state_.get(), data, size) != XXH_OK) throw Error("checksum: XXH3 failed");
  }
  uint64_t digest() const { return XXH3_64bits_digest(state_.get()); }

 private:
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state_;
};

}  // namespace

uint64_t checksum_of(const std::vector<model::PackedTensor>& index, const char* bytes, uint64_t size) {
  Hasher hasher;
  for (const auto& entry : index) {
    if (entry.offset > size || entry.size > size - entry.offset) {
      throw Error("checksum: tensor '" + entry.name + "' lies outside the " + std::to_string(size) + "-byte buffer");
    }
    hasher.add(bytes + entry.offset, static_cast<size_t>(entry.size));
  }
  return hasher.digest();
}

uint64_t checksum_of(const model::PackedTensors& packed) {
  return checksum_of(packed.index, packed.bytes.data(), packed.bytes.size());
}

uint64_t checksum_of(const model::DevicePackedTensors& packed) {
  const auto host = packed.buffer.device().is_cpu() ? packed.buffer.contiguous() : packed.buffer.to(torch::kCPU);
  return checksum_of(packed.index, static_cast<const char*>(host.data_ptr()), static_cast<uint64_t>(host.numel()));
}

std::vector<torch::Tensor> module_tensors(const torch::nn::Module& module,
                                          const std::vector<model::PackedTensor>& index, const std::string& what) {
  std::map<std::string, torch::Tensor> by_name;
  for (const auto& [name, tensor] : model::named_tensors_of(module)) by_name[name] = tensor;
  std::vector<torch::Tensor> tensors;
  for (const auto& entry : index) {
    const auto it = by_name.find(entry.name);
    if (it == by_name.end()) throw Error(what + ": the model has no tensor '" + entry.name + "'");
    tensors.push_back(it->second);
  }
  return tensors;
}

uint64_t checksum_of_module(const torch::nn::Module& module, const std::vector<model::PackedTensor>& index) {
  const auto tensors = module_tensors(module, index, "checksum");
  Hasher hasher;
  for (size_t i = 0; i < index.size(); ++i) {
    const auto& entry = index[i];
    const auto host = tensors[i].detach().to(torch::kCPU).contiguous();
    const auto bytes = static_cast<uint64_t>(host.numel()) * static_cast<uint64_t>(host.element_size());
    if (bytes != entry.size) {
      throw Error("checksum: tensor '" + entry.name + "' holds " + std::to_string(bytes) + " bytes, the version " +
                  std::to_string(entry.size));
    }
    hasher.add(host.data_ptr(), static_cast<size_t>(bytes));
  }
  return hasher.digest();
}

std::string checksum_text(uint64_t checksum) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(checksum));
  return text;
}

}  // namespace sao::weights
