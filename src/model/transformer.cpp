// Llama/Qwen2-layout transformer; see transformer.hpp for the design.
#include "model/transformer.hpp"

#include "model/activation_checkpoint.hpp"

#include "base/error.hpp"
#include "model/batched_matmul.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <limits>

namespace sao::model {

namespace F = torch::nn::functional;

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

namespace {

// A 0-dim tensor holding `value` in x's dtype and device. LibTorch 1.13 turns
// every Scalar operand of a binary op into a double tensor and copies it to
// the other operand's dtype; with a decode step made of a few hundred small
// ops, those conversions were a tenth of its time. Made outside inference
// mode so that training may save it for backward.
const torch::Tensor& constant_like(const torch::Tensor& x, double value) {
  struct Entry {
    double value;
    c10::ScalarType dtype;
    c10::Device device;
    torch::Tensor tensor;
  };
  thread_local std::vector<Entry> constants;
  for (const auto& entry : constants) {
    if (entry.value == value && entry.dtype == x.scalar_type() && entry.device == x.device()) return entry.tensor;
  }
  c10::InferenceMode normal_tensors(false);
  constants.push_back({value, x.scalar_type(), x.device(), torch::full({}, value, x.options())});
  return constants.back().tensor;
}

}  // namespace

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  if (x.scalar_type() != torch::kFloat32) {
    // A low-precision replica (rollout.weights_dtype bf16): the mean of
    // squares in fp32, the result cast back before the gain, as
    // transformers' LlamaRMSNorm does.
    const auto wide = x.to(torch::kFloat32);
    const auto inverse_rms = (wide * wide).mean(-1, /*keepdim=*/true).add_(eps_).rsqrt_();
    return (wide * inverse_rms).to(x.scalar_type()) * weight;
  }
  // [.., D]: scale by the reciprocal root-mean-square, then by the learned gain.
  // In place where the tensor is our own temporary (one allocation fewer),
  // and the mean as a sum times 1/D (no Scalar operands, see constant_like).
  auto inverse_rms = (x * x).sum(-1, /*keepdim=*/true);
  inverse_rms.mul_(constant_like(x, 1.0 / static_cast<double>(x.size(-1)))).add_(constant_like(x, eps_)).rsqrt_();
  return x * inverse_rms * weight;
}

// HF's rotate_half convention: the two halves of the head dimension rotate
// together (not interleaved pairs), which is what Llama/Qwen2 weights expect:
// x * cos + (-x2, x1) * sin. The sign of the first half is folded into the
// stored sin, so the rotation is one flip of the halves plus two products.
RotaryAngles rotary_angles(const torch::Tensor& positions, const torch::Tensor& inv_freq) {
  // positions [B, T]; inv_freq [hd/2]
  auto freqs = positions.to(torch::kFloat32).unsqueeze(-1) * inv_freq;  // [B, T, hd/2]
  auto angles = torch::cat({freqs, freqs}, -1).unsqueeze(1);            // [B, 1, T, hd]
  auto signed_sin = angles.sin();
  const int64_t half = freqs.size(-1);
  signed_sin.narrow(-1, 0, half).neg_();
  return {angles.cos(), signed_sin};
}

namespace {

torch::Tensor apply_rotary(const torch::Tensor& x, const RotaryAngles& rotary) {
  // x [B, H, T, hd] -> halves swapped: (x2, x1), then times (-sin, sin).
  const int64_t half = x.size(-1) / 2;
  auto sizes = x.sizes().vec();
  sizes.back() = 2;
  sizes.push_back(half);
  auto swapped = x.reshape(sizes).flip(-2).view(x.sizes());
  return torch::addcmul(x * rotary.cos, swapped, rotary.signed_sin);
}

// Writes the call's new keys (or values) `fresh` [1, KV, N, hd] to their
// pool slots.
void write_paged(torch::Tensor& stored, const torch::Tensor& fresh, const PagedAttention& call) {
  auto rows = fresh[0].transpose(0, 1);  // [N, KV, hd]
  if (rows.scalar_type() != stored.scalar_type()) rows = rows.to(stored.scalar_type());
  stored.index_copy_(0, call.write_slots, rows.contiguous());
}

// The keys (or values) each row of `group` attends over, [R, KV, S, hd]:
// the row's blocks gathered in order. The gather costs one read of the keys,
// as attention does; it is what lets a row's blocks sit anywhere in the pool.
torch::Tensor gather_paged(const torch::Tensor& stored, const PagedGroup& group, c10::ScalarType dtype) {
  auto gathered =
      stored.index_select(0, group.read_slots).view({group.rows, group.keys_per_row, stored.size(1), stored.size(2)});
  if (gathered.scalar_type() != dtype) gathered = gathered.to(dtype);
  return gathered.transpose(1, 2);
}

// Softmax over the keys; in fp32 for a low-precision replica (as
// transformers' eager attention does), cast back for the product with V.
torch::Tensor attention_weights(const torch::Tensor& scores, c10::ScalarType values_dtype) {
  if (scores.scalar_type() == torch::kFloat32) return torch::softmax(scores, -1);
  return torch::softmax(scores, -1, torch::kFloat32).to(values_dtype);
}

}  // namespace

torch::Tensor rotary_inverse_frequencies(const ModelConfig& config) {
  const int64_t head_dim = config.head_dim();
  // transformers: 1 / theta^(2i / d), the exponent formed in float32.
  auto inv_freq = 1.0 / torch::pow(config.rope_theta, torch::arange(0, head_dim, 2, torch::kInt64).to(torch::kFloat32) /
                                                          static_cast<double>(head_dim));
  inv_freq = inv_freq.to(torch::kFloat32);
  const auto& scaling = config.rope_scaling;
  if (scaling.type == "linear") return inv_freq / scaling.factor;  // positions divided by the factor
  if (scaling.type != "llama3") return inv_freq;
  // Llama 3.1: long wavelengths are slowed by `factor`, short ones kept, and
  // the band between interpolated smoothly.
  const double old_context = static_cast<double>(scaling.original_max_position_embeddings);
  const double low_freq_wavelen = old_context / scaling.low_freq_factor;
  const double high_freq_wavelen = old_context / scaling.high_freq_factor;
  const auto wavelen = 2 * M_PI / inv_freq;
  auto scaled = torch::where(wavelen > low_freq_wavelen, inv_freq / scaling.factor, inv_freq);
  const auto smooth =
      (old_context / wavelen - scaling.low_freq_factor) / (scaling.high_freq_factor - scaling.low_freq_factor);
  const auto smoothed = (1 - smooth) * scaled / scaling.factor + smooth * scaled;
  const auto medium = (wavelen >= high_freq_wavelen).logical_and(wavelen <= low_freq_wavelen);
  return torch::where(medium, smoothed, scaled).to(torch::kFloat32);
}

torch::Tensor project(torch::nn::Linear& linear, LoraPath& lora, const torch::Tensor& x, bool training) {
  auto y = linear->forward(x);
  if (!lora) return y;
  // A frozen base kept in bf16 (learner.lora_base_dtype) beside fp32
  // adapters: the adapter runs in its own dtype and its term joins the
  // base's output in the base's dtype, as PEFT does.
  const auto adapter_dtype = lora.a->weight.scalar_type();
  auto input = x.scalar_type() == adapter_dtype ? x : x.to(adapter_dtype);
  if (lora.dropout > 0.0 && training) input = F::dropout(input, F::DropoutFuncOptions().p(lora.dropout).training(true));
  auto term = lora.b->forward(lora.a->forward(input)) * lora.scaling;
  return y + (term.scalar_type() == y.scalar_type() ? term : term.to(y.scalar_type()));
}

AttentionImpl::AttentionImpl(const ModelConfig& config)
    : num_heads_(config.num_attention_heads), num_kv_heads_(config.num_key_value_heads), head_dim_(config.head_dim()) {
  const int64_t d = config.hidden_size;
  const int64_t q_dim = num_heads_ * head_dim_;
  const int64_t kv_dim = num_kv_heads_ * head_dim_;
  const bool bias = config.attention_bias;
  q_proj = register_module("q_proj", torch::nn::Linear(torch::nn::LinearOptions(d, q_dim).bias(bias)));
  k_proj = register_module("k_proj", torch::nn::Linear(torch::nn::LinearOptions(d, kv_dim).bias(bias)));
  v_proj = register_module("v_proj", torch::nn::Linear(torch::nn::LinearOptions(d, kv_dim).bias(bias)));
  o_proj = register_module("o_proj", torch::nn::Linear(torch::nn::LinearOptions(q_dim, d).bias(false)));
  if (config.qk_norm()) {
    q_norm = register_module("q_norm", RMSNorm(head_dim_, config.rms_norm_eps));
    k_norm = register_module("k_norm", RMSNorm(head_dim_, config.rms_norm_eps));
  }
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const RotaryAngles& rotary, const torch::Tensor& visible,
                                     const LayerCache* cache) {
  const int64_t batch = x.size(0);
  const int64_t steps = x.size(1);
  const bool training = is_training();
  auto q = project(q_proj, q_lora, x, training).view({batch, steps, num_heads_, head_dim_});     // [B, T, H, hd]
  auto k = project(k_proj, k_lora, x, training).view({batch, steps, num_kv_heads_, head_dim_});  // [B, T, KV, hd]
  if (q_norm) {
    q = q_norm(q);
    k = k_norm(k);
  }
  q = q.transpose(1, 2);  // [B, H, T, hd]
  k = k.transpose(1, 2);  // [B, KV, T, hd]
  auto v = project(v_proj, v_lora, x, training).view({batch, steps, num_kv_heads_, head_dim_}).transpose(1, 2);
  q = apply_rotary(q, rotary) * constant_like(q, 1.0 / std::sqrt(static_cast<double>(head_dim_)));
  k = apply_rotary(k, rotary);
  const auto context = cache != nullptr ? forward_paged(q, k, v, *cache) : attend(q, k, v, visible);
  return project(o_proj, o_lora, context, training);
}

torch::Tensor AttentionImpl::attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    const torch::Tensor& visible) const {
  const int64_t batch = q.size(0);
  const int64_t steps = q.size(2);
  const int64_t slots = k.size(2);
  // Grouped-query attention without copying keys per query head: the G query
  // heads that share a key head are stacked along the query axis, so one
  // matmul per key head covers them ([B, KV, G*T, hd] x [B, KV, hd, S]).
  const int64_t group = num_heads_ / num_kv_heads_;
  if (steps == 1) {
    // A decode step: one query per row. LibTorch's CPU bmm runs its batch as
    // a loop of B*KV tiny matmuls with three tensor selects each, which at
    // batch 256 cost more than the rest of the step; a broadcast product
    // summed over head_dim is one vectorised pass over the keys instead.
    auto q_rows = q.reshape({batch, num_kv_heads_, group, 1, head_dim_});
    auto scores = (q_rows * k.unsqueeze(2)).sum(-1);                                              // [B, KV, G, S]
    scores = scores.masked_fill(visible.logical_not(), -std::numeric_limits<float>::infinity());  // [B, 1, 1, S]
    auto weights = attention_weights(scores, v.scalar_type()).unsqueeze(-1);                      // [B, KV, G, S, 1]
    auto context = (weights * v.unsqueeze(2)).sum(-2);                                            // [B, KV, G, hd]
    return context.reshape({batch, 1, num_heads_ * head_dim_});
  }
  auto grouped_q = q.reshape({batch, num_kv_heads_, group * steps, head_dim_});
  auto scores =
      batched_matmul(grouped_q, k.contiguous().transpose(-2, -1)).view({batch, num_kv_heads_, group, steps, slots});
  scores = scores.masked_fill(visible.logical_not().unsqueeze(1), -std::numeric_limits<float>::infinity());
  auto weights = attention_weights(scores, v.scalar_type()).view({batch, num_kv_heads_, group * steps, slots});
  auto context = batched_matmul(weights, v.contiguous()).view({batch, num_heads_, steps, head_dim_});  // [B, H, T, hd]
  return context.transpose(1, 2).reshape({batch, steps, num_heads_ * head_dim_});
}

torch::Tensor AttentionImpl::forward_paged(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                           const LayerCache& cache) const {
  // q [1, H, N, hd], k and v [1, KV, N, hd]: the call's tokens, flattened.
  const auto& call = *cache.call;
  const int64_t tokens = q.size(2);
  write_paged(*cache.keys, k, call);
  write_paged(*cache.values, v, call);
  const auto q_rows = q[0].transpose(0, 1);  // [N, H, hd]
  torch::Tensor context;
  for (const auto& group : call.groups) {
    const bool whole_call = call.groups.size() == 1;  // the group's tokens are the call's, in order
    auto group_q = whole_call ? q_rows : q_rows.index_select(0, group.tokens);  // [n, H, hd]
    if (group.steps > 1) {
      group_q = torch::zeros({group.rows * group.steps, num_heads_, head_dim_}, q.options())
                    .index_copy_(0, group.padded_index, group_q);
    }
    group_q = group_q.view({group.rows, group.steps, num_heads_, head_dim_}).transpose(1, 2);  // [R, H, T, hd]
    auto group_context = attend(group_q, gather_paged(*cache.keys, group, q.scalar_type()),
                                gather_paged(*cache.values, group, q.scalar_type()), group.visible)
                             .reshape({group.rows * group.steps, num_heads_ * head_dim_});
    if (group.steps > 1) group_context = group_context.index_select(0, group.padded_index);
    if (whole_call) return group_context.unsqueeze(0);
    if (!context.defined()) context = torch::empty({tokens, num_heads_ * head_dim_}, group_context.options());
    context.index_copy_(0, group.tokens, group_context);
  }
  return context.unsqueeze(0);  // [1, N, H * hd]
}

MLPImpl::MLPImpl(const ModelConfig& config) {
  const int64_t d = config.hidden_size;
  const int64_t f = config.intermediate_size;
  gate_proj = register_module("gate_proj", torch::nn::Linear(torch::nn::LinearOptions(d, f).bias(false)));
  up_proj = register_module("up_proj", torch::nn::Linear(torch::nn::LinearOptions(d, f).bias(false)));
  down_proj = register_module("down_proj", torch::nn::Linear(torch::nn::LinearOptions(f, d).bias(false)));
}

torch::Tensor MLPImpl::forward(const torch::Tensor& x) {
  const bool training = is_training();
  const auto gated = F::silu(project(gate_proj, gate_lora, x, training)) * project(up_proj, up_lora, x, training);
  return project(down_proj, down_lora, gated, training);  // SwiGLU
}

DecoderLayerImpl::DecoderLayerImpl(const ModelConfig& config) {
  self_attn = register_module("self_attn", Attention(config));
  mlp = register_module("mlp", MLP(config));
  input_layernorm = register_module("input_layernorm", RMSNorm(config.hidden_size, config.rms_norm_eps));
  post_attention_layernorm =
      register_module("post_attention_layernorm", RMSNorm(config.hidden_size, config.rms_norm_eps));
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const RotaryAngles& rotary,
                                        const torch::Tensor& visible, const LayerCache* cache) {
  auto hidden = x + self_attn(input_layernorm(x), rotary, visible, cache);
  return hidden + mlp(post_attention_layernorm(hidden));
}

BackboneImpl::BackboneImpl(const ModelConfig& config) : config_(config), inv_freq_(rotary_inverse_frequencies(config)) {
  config.validate("model config");
  embed_tokens = register_module("embed_tokens", torch::nn::Embedding(config.vocab_size, config.hidden_size));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) layers->push_back(DecoderLayer(config));
  norm = register_module("norm", RMSNorm(config.hidden_size, config.rms_norm_eps));
}

torch::Tensor BackboneImpl::run_layers(torch::Tensor hidden, const torch::Tensor& positions,
                                       const torch::Tensor& visible, const PagedAttention* paged) {
  // The frequencies are a plain member, not a buffer (checkpoints and weight
  // messages carry parameters only), so module.to(device) leaves them behind.
  if (inv_freq_.device() != positions.device()) inv_freq_ = inv_freq_.to(positions.device());
  auto rotary = rotary_angles(positions, inv_freq_);
  if (hidden.scalar_type() != torch::kFloat32) {
    // Angles formed in fp32, then cast to the replica's dtype (transformers
    // does the same), so q and k stay in it.
    rotary.cos = rotary.cos.to(hidden.scalar_type());
    rotary.signed_sin = rotary.signed_sin.to(hidden.scalar_type());
  }
  // Only a pass that builds a graph has activations to spare.
  const bool checkpoint = activation_checkpointing_ && paged == nullptr && torch::GradMode::is_enabled();
  for (size_t i = 0; i < layers->size(); ++i) {
    auto layer = layers->ptr<DecoderLayerImpl>(i);
    if (checkpoint) {
      hidden = checkpointed_layer(*layer, hidden, rotary, visible);
      continue;
    }
    if (paged == nullptr) {
      hidden = layer->forward(hidden, rotary, visible, nullptr);
      continue;
    }
    const LayerCache layer_cache{&(*paged->keys)[i], &(*paged->values)[i], paged};
    hidden = layer->forward(hidden, rotary, visible, &layer_cache);
  }
  return norm(hidden);
}

torch::Tensor BackboneImpl::forward(const torch::Tensor& input_ids) {
  const int64_t steps = input_ids.size(1);
  if (steps > config_.max_position_embeddings) {
    throw Error("sequence of " + std::to_string(steps) + " tokens exceeds max_position_embeddings " +
                std::to_string(config_.max_position_embeddings));
  }
  const auto on = input_ids.device();
  auto positions =
      torch::arange(steps, torch::dtype(torch::kInt64).device(on)).unsqueeze(0).expand({input_ids.size(0), steps});
  auto visible = torch::ones({steps, steps}, torch::dtype(torch::kBool).device(on)).tril().view({1, 1, steps, steps});
  return run_layers(embed_tokens(input_ids), positions, visible, nullptr);
}

torch::Tensor BackboneImpl::forward_paged(const torch::Tensor& input_ids, const PagedAttention& paged) {
  const int64_t tokens = input_ids.numel();
  int64_t grouped = 0;
  for (const auto& group : paged.groups) grouped += group.tokens.numel();
  if (paged.keys == nullptr || paged.values == nullptr ||
      static_cast<int64_t>(paged.keys->size()) != config_.num_hidden_layers || input_ids.dim() != 2 ||
      input_ids.size(0) != 1 || paged.positions.sizes() != input_ids.sizes() || paged.write_slots.numel() != tokens ||
      grouped != tokens) {
    throw Error("forward_paged: the pool's layers, positions, slots and groups do not match the call's " +
                std::to_string(tokens) + " tokens");
  }
  if (paged.positions.max().item<int64_t>() >= config_.max_position_embeddings) {
    throw Error("sequence exceeds max_position_embeddings " + std::to_string(config_.max_position_embeddings));
  }
  return run_layers(embed_tokens(input_ids), paged.positions, torch::Tensor(), &paged);
}

CausalLMImpl::CausalLMImpl(const ModelConfig& config) {
  model = register_module("model", Backbone(config));
  if (!config.tie_word_embeddings) {
    lm_head = register_module(
        "lm_head", torch::nn::Linear(torch::nn::LinearOptions(config.hidden_size, config.vocab_size).bias(false)));
  }
  if (config.lora.enabled()) {
    model->set_lora(LoraConfig{});
    attach_lora(config.lora);
  }
}

void CausalLMImpl::attach_lora(const LoraConfig& lora) {
  if (config().lora.enabled()) throw Error("attach_lora: the policy has adapters already");
  lora.validate("attach_lora");
  if (!lora.enabled()) return;
  for (auto& parameter : parameters()) parameter.set_requires_grad(false);
  const auto attach = [&](torch::nn::Linear& linear, LoraPath& path, const char* name) {
    if (!lora.targets_projection(name)) return;
    const int64_t in = linear->options.in_features();
    const int64_t out = linear->options.out_features();
    path.a = linear->register_module("lora_A", torch::nn::Linear(torch::nn::LinearOptions(in, lora.rank).bias(false)));
    path.b = linear->register_module("lora_B", torch::nn::Linear(torch::nn::LinearOptions(lora.rank, out).bias(false)));
    path.a->to(linear->weight.device());  // adapters stay fp32 whatever the base's dtype
    path.b->to(linear->weight.device());
    torch::NoGradGuard no_grad;
    path.b->weight.zero_();  // PEFT's init: the adapter starts as the identity change
    path.scaling = lora.scaling();
    path.dropout = lora.dropout;
  };
  for (const auto& layer_module : *model->layers) {
    auto* layer = layer_module->as<DecoderLayerImpl>();
    auto& attention = *layer->self_attn;
    attach(attention.q_proj, attention.q_lora, "q_proj");
    attach(attention.k_proj, attention.k_lora, "k_proj");
    attach(attention.v_proj, attention.v_lora, "v_proj");
    attach(attention.o_proj, attention.o_lora, "o_proj");
    auto& mlp = *layer->mlp;
    attach(mlp.gate_proj, mlp.gate_lora, "gate_proj");
    attach(mlp.up_proj, mlp.up_lora, "up_proj");
    attach(mlp.down_proj, mlp.down_lora, "down_proj");
  }
  model->set_lora(lora);
}

std::vector<std::pair<std::string, std::vector<int64_t>>> policy_tensor_shapes(const ModelConfig& config) {
  const int64_t d = config.hidden_size;
  const int64_t kv_dim = config.num_key_value_heads * config.head_dim();
  const int64_t f = config.intermediate_size;
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
  shapes.push_back({"model.embed_tokens.weight", {config.vocab_size, d}});
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    const std::string layer = "model.layers." + std::to_string(i) + ".";
    const auto linear = [&](const std::string& name, int64_t in, int64_t out, bool bias) {
      shapes.push_back({layer + name + ".weight", {out, in}});
      if (bias) shapes.push_back({layer + name + ".bias", {out}});
      if (config.lora.enabled() && config.lora.targets_projection(name.substr(name.find('.') + 1))) {
        shapes.push_back({layer + name + ".lora_A.weight", {config.lora.rank, in}});
        shapes.push_back({layer + name + ".lora_B.weight", {out, config.lora.rank}});
      }
    };
    const int64_t q_dim = config.num_attention_heads * config.head_dim();
    linear("self_attn.q_proj", d, q_dim, config.attention_bias);
    linear("self_attn.k_proj", d, kv_dim, config.attention_bias);
    linear("self_attn.v_proj", d, kv_dim, config.attention_bias);
    linear("self_attn.o_proj", q_dim, d, false);
    if (config.qk_norm()) {
      shapes.push_back({layer + "self_attn.q_norm.weight", {config.head_dim()}});
      shapes.push_back({layer + "self_attn.k_norm.weight", {config.head_dim()}});
    }
    linear("mlp.gate_proj", d, f, false);
    linear("mlp.up_proj", d, f, false);
    linear("mlp.down_proj", f, d, false);
    shapes.push_back({layer + "input_layernorm.weight", {d}});
    shapes.push_back({layer + "post_attention_layernorm.weight", {d}});
  }
  shapes.push_back({"model.norm.weight", {d}});
  if (!config.tie_word_embeddings) shapes.push_back({"lm_head.weight", {config.vocab_size, d}});
  return shapes;
}

torch::Tensor CausalLMImpl::logits_from_hidden(const torch::Tensor& hidden) {
  return lm_head ? lm_head(hidden) : F::linear(hidden, model->embed_tokens->weight);
}

torch::Tensor CausalLMImpl::forward(const torch::Tensor& input_ids) {
  return logits_from_hidden(model->forward(input_ids));
}

ValueModelImpl::ValueModelImpl(const ModelConfig& policy_config) {
  // The critic stays a full model: the policy's adapters are not its own.
  auto config = policy_config;
  config.lora = LoraConfig{};
  model = register_module("model", Backbone(config));
  score = register_module("score", torch::nn::Linear(torch::nn::LinearOptions(config.hidden_size, 1).bias(false)));
  torch::NoGradGuard no_grad;
  score->weight.zero_();
}

torch::Tensor ValueModelImpl::forward(const torch::Tensor& input_ids) {
  return score(model->forward(input_ids)).squeeze(-1);
}

namespace {
void copy_parameters(torch::nn::Module& destination, const torch::nn::Module& source, const std::string& prefix) {
  torch::NoGradGuard no_grad;
  auto destination_params = destination.named_parameters(/*recurse=*/true);
  for (const auto& item : source.named_parameters(/*recurse=*/true)) {
    if (item.key().rfind(prefix, 0) != 0) continue;
    auto* target = destination_params.find(item.key());
    if (target == nullptr) throw Error("parameter '" + item.key() + "' has no counterpart in the destination model");
    target->copy_(item.value());
  }
}
}  // namespace

void init_value_from_policy(ValueModel& value_model, const CausalLM& policy) {
  // The critic has no adapters: it starts from the policy's base weights
  // (a fresh adapter's B is zero, so they are the policy's weights too).
  torch::NoGradGuard no_grad;
  auto destination_params = value_model->named_parameters(/*recurse=*/true);
  for (const auto& item : policy->named_parameters(/*recurse=*/true)) {
    if (item.key().rfind("model.", 0) != 0 || is_lora_tensor_name(item.key())) continue;
    auto* target = destination_params.find(item.key());
    if (target == nullptr) throw Error("parameter '" + item.key() + "' has no counterpart in the critic");
    target->copy_(item.value());
  }
}

CausalLM clone_policy(const CausalLM& policy) {
  CausalLM copy(policy->config());
  copy_parameters(*copy, *policy, "");
  return copy;
}

ValueModel clone_value_model(const ValueModel& value_model) {
  ValueModel copy(value_model->config());
  copy_parameters(*copy, *value_model, "");
  return copy;
}

const char* param_group_name(ParamGroup group) {
  switch (group) {
    case ParamGroup::kAttention:
      return "attention";
    case ParamGroup::kMlp:
      return "mlp";
    case ParamGroup::kNorm:
      return "norm";
    case ParamGroup::kEmbedding:
      return "embedding";
    case ParamGroup::kHead:
      return "head";
  }
  return "unknown";
}

ParamGroup param_group_from_name(const std::string& name) {
  for (auto group :
       {ParamGroup::kAttention, ParamGroup::kMlp, ParamGroup::kNorm, ParamGroup::kEmbedding, ParamGroup::kHead}) {
    if (name == param_group_name(group)) return group;
  }
  throw Error("unknown parameter group '" + name + "' (known: attention, mlp, norm, embedding, head)");
}

ParamGroup param_group_of(const std::string& parameter_name) {
  // Norms first: Qwen3's per-head q_norm/k_norm sit inside self_attn but
  // are gains (initialised to 1), not projections.
  if (parameter_name.find("norm.") != std::string::npos) return ParamGroup::kNorm;
  if (parameter_name.find(".self_attn.") != std::string::npos) return ParamGroup::kAttention;
  if (parameter_name.find(".mlp.") != std::string::npos) return ParamGroup::kMlp;
  if (parameter_name.find("embed_tokens.") != std::string::npos) return ParamGroup::kEmbedding;
  if (parameter_name.rfind("lm_head.", 0) == 0 || parameter_name.rfind("score.", 0) == 0) return ParamGroup::kHead;
  throw Error("parameter '" + parameter_name + "' belongs to no known parameter group");
}

int64_t set_group_trainable(torch::nn::Module& module, ParamGroup group, bool trainable) {
  int64_t changed = 0;
  for (auto& item : module.named_parameters(/*recurse=*/true)) {
    if (param_group_of(item.key()) != group) continue;
    item.value().set_requires_grad(trainable);
    ++changed;
  }
  if (changed == 0) {
    throw Error(std::string("cannot ") + (trainable ? "unfreeze" : "freeze") + " parameter group '" +
                param_group_name(group) + "': the model has no parameter in it");
  }
  return changed;
}

void init_weights(torch::nn::Module& module, uint64_t seed) {
  torch::NoGradGuard no_grad;
  auto generator = at::detail::createCPUGenerator(seed);
  for (auto& item : module.named_parameters(/*recurse=*/true)) {
    auto& tensor = item.value();
    const auto& name = item.key();
    if (param_group_of(name) == ParamGroup::kNorm) {
      tensor.fill_(1.0);
    } else if (name.rfind("score.", 0) == 0 || (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0)) {
      tensor.zero_();  // zero value head: the critic starts predicting 0
    } else {
      tensor.normal_(0.0, 0.02, generator);
    }
  }
}

}  // namespace sao::model
