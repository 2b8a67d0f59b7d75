// Activation checkpointing for the training forward pass: a decoder layer
// run through checkpointed_layer keeps only its input for backward (not
// every attention and MLP intermediate) and runs its forward again inside
// backward to get them. Memory per layer falls from the layer's activations
// to one [B, T, D] tensor, for one more forward pass a step. Why by hand:
// LibTorch's C++ API has no torch.utils.checkpoint; this is the same
// re-entrant scheme (a custom autograd function whose backward recomputes
// and runs a nested backward, which accumulates the layer's parameter
// gradients). The layer must be deterministic (sao's has no dropout).
#pragma once

#include "model/transformer.hpp"

#include <torch/types.h>

namespace sao::model {

// layer.forward(hidden, rotary, visible, nullptr) with checkpointing: the
// same values, the same gradients.
torch::Tensor checkpointed_layer(DecoderLayerImpl& layer, const torch::Tensor& hidden, const RotaryAngles& rotary,
                                 const torch::Tensor& visible);

}  // namespace sao::model
