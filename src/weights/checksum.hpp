// The checksum of one weight version: XXH3-64 (libxxhash) over every
// tensor's bytes in index order (not the alignment padding between them),
// so the learner's packed buffer and a receiver's own loaded tensors give
// the same number when, and only when, they hold the same bytes.
#pragma once

#include "model/tensor_blob.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace sao::weights {

// Throws sao::Error when an entry lies outside the buffer.
uint64_t checksum_of(const std::vector<model::PackedTensor>& index, const char* bytes, uint64_t size);
uint64_t checksum_of(const model::PackedTensors& packed);
// A device pack is hashed on the host (one device-to-host copy).
uint64_t checksum_of(const model::DevicePackedTensors& packed);
// The module's own tensors named by `index`, in its order: what a receiver
// computes after loading a version. Throws sao::Error naming a tensor the
// module lacks.
uint64_t checksum_of_module(const torch::nn::Module& module, const std::vector<model::PackedTensor>& index);
// The module's tensors named by `index`, in its order (what the receiver
// checks and a bf16 replica reads and writes). Throws sao::Error
// "`what`: the model has no tensor 'NAME'".
std::vector<torch::Tensor> module_tensors(const torch::nn::Module& module,
                                          const std::vector<model::PackedTensor>& index, const std::string& what);

// 16 lower-case hex digits, for status and logs.
std::string checksum_text(uint64_t checksum);

}  // namespace sao::weights
