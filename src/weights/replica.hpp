// Low-precision rollout replicas (rollout.weights_dtype "bf16"): the policy
// a rollout decodes with, in bf16, converted once per version by the sender
// instead of cast at every decode step. A replica receives the version
// already in bf16 (half the bytes of fp32 by any route) or as a delta from
// the version it holds (weights/delta.hpp), and the checksum it checks is
// that of the bf16 bytes, so every route stays exact.
#pragma once

#include "weights/delta.hpp"
#include "weights/packet.hpp"

#include <torch/nn/module.h>

namespace sao::weights {

// The version as a bf16 replica loads it: every F32 tensor of `source`
// converted by torch (to nearest even, as module->to(kBFloat16) rounds),
// every other tensor as it is, laid out as pack_tensors does; the checksum
// of those bytes. A host version gives a kCafBytes packet, a device version
// a kDeviceCopy packet on the same device. Throws sao::Error for a packet
// that carries neither (a notice, a handle).
Packet bf16_packet(const Packet& source);

// Whether every floating tensor of the packet is BF16: what a replica loads.
bool is_bf16_version(const Packet& packet);

// The bf16 image of a host bf16 pack (bf16_packet's bytes).
Bf16Image image_of_packet(const Packet& bf16_version);

// The module's tensors named by `index` (all BF16), in its order: the image
// of the version a replica holds. Throws sao::Error naming a tensor the
// module lacks or holds in another dtype or size.
Bf16Image image_of_module(const torch::nn::Module& module, const std::vector<model::PackedTensor>& index,
                          int64_t version);
// Writes `image` into the module's tensors named by `index`, in order.
// Validates every tensor first (present, BF16, of the index's size, the
// image as long as the index), so a mismatch leaves the module unchanged.
// Throws sao::Error naming `where`.
void load_image_into_module(const Bf16Image& image, const std::vector<model::PackedTensor>& index,
                            torch::nn::Module& module, const std::string& where);

}  // namespace sao::weights
