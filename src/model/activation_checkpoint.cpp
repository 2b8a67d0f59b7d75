// Activation checkpointing; see activation_checkpoint.hpp.
#include "model/activation_checkpoint.hpp"

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

namespace sao::model {

namespace {

class CheckpointedLayer : public torch::autograd::Function<CheckpointedLayer> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& hidden,
                               const torch::Tensor& cos, const torch::Tensor& signed_sin, const torch::Tensor& visible,
                               DecoderLayerImpl* layer) {
    ctx->save_for_backward({hidden, cos, signed_sin, visible});
    ctx->saved_data["layer"] = reinterpret_cast<int64_t>(layer);
    // Recomputed under the same autocast as now (backward runs on the
    // engine's threads, where autocast is off).
    ctx->saved_data["autocast_cuda"] = at::autocast::is_enabled();
    return layer->forward(hidden, {cos, signed_sin}, visible, nullptr);  // no graph is recorded in here
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    auto* layer = reinterpret_cast<DecoderLayerImpl*>(ctx->saved_data["layer"].toInt());
    const bool autocast = ctx->saved_data["autocast_cuda"].toBool();
    auto input = saved[0].detach().requires_grad_(saved[0].requires_grad());
    torch::Tensor output;
    {
      const torch::AutoGradMode grad_mode(true);
      const bool previous = at::autocast::is_enabled();
      at::autocast::set_enabled(autocast);
      output = layer->forward(input, {saved[1], saved[2]}, saved[3], nullptr);
      at::autocast::set_enabled(previous);
    }
    // Nested backward: the layer's parameters get their gradients here.
    torch::autograd::backward({output}, {grad_outputs[0]});
    return {input.requires_grad() ? input.grad() : torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

torch::Tensor checkpointed_layer(DecoderLayerImpl& layer, const torch::Tensor& hidden, const RotaryAngles& rotary,
                                 const torch::Tensor& visible) {
  return CheckpointedLayer::apply(hidden, rotary.cos, rotary.signed_sin, visible, &layer);
}

}  // namespace sao::model
