// Decoder-only transformer in the Llama/Qwen2 layout (RMSNorm, rotary
// position embeddings, SwiGLU MLP, grouped-query attention). Module and
// parameter names reproduce Hugging Face's, e.g.
// "model.layers.0.self_attn.q_proj.weight", so safetensors checkpoints of
// real models map onto these modules without renaming.
//
// The policy (CausalLM) and the value model (ValueModel) share this backbone
// class but never share weights: SAO trains the critic separately so that
// value-only updates cannot move the policy.
#pragma once

#include "model/model_config.hpp"

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

namespace sao::model {

// Where one call of the backbone reads and writes keys and values: the
// block pool's per-layer storage (paged_kv.hpp owns the pool and builds
// this). The call's N new tokens are flattened into one row, so every
// projection, norm and MLP runs once over all of them; only attention is
// per sequence, in groups of rows that share its shape: rows with one new
// token (decoding) and rows with several (prompts, observations), the
// latter right-padded to the longest. Slots index the pool's storage, whose
// last slot is the padding slot.
struct PagedGroup {
  torch::Tensor tokens;        // [n] int64: the group's tokens, as indices into the call's N
  torch::Tensor padded_index;  // [n] int64: each token's index in the group's padded [rows * steps]
  int64_t rows = 0;            // R
  int64_t steps = 0;           // T: new tokens of the group's longest row
  torch::Tensor read_slots;    // [R * S] int64 pool slot of each key a row attends over
  torch::Tensor visible;       // [R, 1, T, S] bool: which keys each new token sees
  int64_t keys_per_row = 0;    // S
};

struct PagedAttention {
  std::vector<torch::Tensor>* keys = nullptr;    // per layer [pool slots, n_kv_heads, head_dim]
  std::vector<torch::Tensor>* values = nullptr;  // per layer [pool slots, n_kv_heads, head_dim]
  torch::Tensor positions;                       // [1, N] int64 rotary position of each new token
  torch::Tensor write_slots;                     // [N] int64 pool slot of each new token
  std::vector<PagedGroup> groups;
};

// The rotary angles of a call's positions, computed once and shared by
// every layer: cos [B, 1, T, head_dim], and sin with the sign of
// rotate_half folded in (its first half negated).
struct RotaryAngles {
  torch::Tensor cos;
  torch::Tensor signed_sin;
};
// positions [B, T] int64; inv_freq from rotary_inverse_frequencies.
RotaryAngles rotary_angles(const torch::Tensor& positions, const torch::Tensor& inv_freq);

// One layer's view of a PagedAttention.
struct LayerCache {
  torch::Tensor* keys = nullptr;
  torch::Tensor* values = nullptr;
  const PagedAttention* call = nullptr;
};

// The rotary inverse frequencies [head_dim / 2] (float32) of `config`, with
// its rope_scaling applied as transformers computes them.
torch::Tensor rotary_inverse_frequencies(const ModelConfig& config);

class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(RMSNorm);

// One low-rank adapter beside a projection W: y = W x + scaling * B A
// dropout(x), PEFT's LoRA. A [r, in] and B [out, r] are registered under the
// projection as "lora_A" and "lora_B" (so the policy's parameter names are
// PEFT's without its "base_model.model." prefix); B starts at zero, so an
// attached adapter leaves the model's output unchanged.
struct LoraPath {
  torch::nn::Linear a{nullptr};
  torch::nn::Linear b{nullptr};
  double scaling = 0.0;
  double dropout = 0.0;
  explicit operator bool() const { return !a.is_empty(); }
};
// `linear`(x), plus the adapter's term when `lora` is attached (dropout
// only while `training`).
torch::Tensor project(torch::nn::Linear& linear, LoraPath& lora, const torch::Tensor& x, bool training);

class AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(const ModelConfig& config);
  // x [B, T, D]; visible [B, 1, T, S] bool. With a cache, x is the call's
  // flattened tokens [1, N, D]: their keys go to their pool slots and each
  // attends over its sequence's keys (visible is unused).
  torch::Tensor forward(const torch::Tensor& x, const RotaryAngles& rotary, const torch::Tensor& visible,
                        const LayerCache* cache);
  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  LoraPath q_lora, k_lora, v_lora, o_lora;  // attached by CausalLM when its config has lora
  // Qwen3: RMSNorm over each head's query and key before rotation; null otherwise.
  RMSNorm q_norm{nullptr}, k_norm{nullptr};

 private:
  // softmax(q k^T) v for rows of equal query count: q [B, H, T, hd] (rotated
  // and scaled), k and v [B, KV, S, hd], visible [B, 1, T, S]. Context [B, T, H * hd].
  torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                       const torch::Tensor& visible) const;
  torch::Tensor forward_paged(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const LayerCache& cache) const;
  int64_t num_heads_, num_kv_heads_, head_dim_;
};
TORCH_MODULE(Attention);

class MLPImpl : public torch::nn::Module {
 public:
  explicit MLPImpl(const ModelConfig& config);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
  LoraPath gate_lora, up_lora, down_lora;
};
TORCH_MODULE(MLP);

class DecoderLayerImpl : public torch::nn::Module {
 public:
  explicit DecoderLayerImpl(const ModelConfig& config);
  torch::Tensor forward(const torch::Tensor& x, const RotaryAngles& rotary, const torch::Tensor& visible,
                        const LayerCache* cache);
  Attention self_attn{nullptr};
  MLP mlp{nullptr};
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
};
TORCH_MODULE(DecoderLayer);

// The shared trunk: embeddings, decoder layers, final norm. Returns hidden
// states [B, T, D].
class BackboneImpl : public torch::nn::Module {
 public:
  explicit BackboneImpl(const ModelConfig& config);
  // Full causal pass over right-padded sequences (training). input_ids [B, T].
  torch::Tensor forward(const torch::Tensor& input_ids);
  // Incremental pass over a block pool: input_ids [1, N] are the call's new
  // tokens, flattened (paged_kv.hpp's forward_paged builds `paged`).
  // Hidden [1, N, D].
  torch::Tensor forward_paged(const torch::Tensor& input_ids, const PagedAttention& paged);

  const ModelConfig& config() const { return config_; }
  // Training passes keep only each layer's input and recompute the layer in
  // backward (activation_checkpoint.hpp): less memory, one more forward.
  void set_activation_checkpointing(bool on) { activation_checkpointing_ = on; }
  // Only CausalLM::attach_lora calls this: the config then says what it attached.
  void set_lora(const LoraConfig& lora) { config_.lora = lora; }
  bool activation_checkpointing() const { return activation_checkpointing_; }
  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RMSNorm norm{nullptr};

 private:
  torch::Tensor run_layers(torch::Tensor hidden, const torch::Tensor& positions, const torch::Tensor& visible,
                           const PagedAttention* paged);
  ModelConfig config_;
  torch::Tensor inv_freq_;  // [head_dim / 2] float32 rotary frequencies, rope_scaling applied
  bool activation_checkpointing_ = false;
};
TORCH_MODULE(Backbone);

// Policy: backbone + LM head ("lm_head.weight", or tied to the embeddings).
// With config.lora enabled, every targeted projection of every layer gets a
// LoraPath and every other parameter is frozen (requires_grad false): the
// learner then trains the adapters only. Adapters start as PEFT's do (A
// Kaiming-uniform from torch's generator, B zero); init_lora (lora.hpp)
// draws A from a seed.
class CausalLMImpl : public torch::nn::Module {
 public:
  explicit CausalLMImpl(const ModelConfig& config);
  torch::Tensor forward(const torch::Tensor& input_ids);  // logits [B, T, V]
  torch::Tensor logits_from_hidden(const torch::Tensor& hidden);
  const ModelConfig& config() const { return model->config(); }  // lora included
  // Attaches adapters to a policy built without them (its weights loaded
  // first: a checkpoint's base) and freezes everything else; config().lora
  // says so from then on. Throws sao::Error if adapters are attached already.
  void attach_lora(const LoraConfig& lora);
  Backbone model{nullptr};
  torch::nn::Linear lm_head{nullptr};  // null when tied
};
TORCH_MODULE(CausalLM);

// The names and shapes of the tensors CausalLM(config) registers, in
// registration order, computed without allocating anything: a checkpoint's
// weights file can be checked against its config.json before a model of that
// size is built. tests/test_model.cpp pins it to named_tensors_of(CausalLM).
std::vector<std::pair<std::string, std::vector<int64_t>>> policy_tensor_shapes(const ModelConfig& config);

// Critic: a backbone of its own + scalar head "score.weight" (the HF name of
// sequence-classification heads). forward gives V(s_t) for every position.
class ValueModelImpl : public torch::nn::Module {
 public:
  explicit ValueModelImpl(const ModelConfig& config);
  torch::Tensor forward(const torch::Tensor& input_ids);  // values [B, T]
  const ModelConfig& config() const { return model->config(); }
  Backbone model{nullptr};
  torch::nn::Linear score{nullptr};
};
TORCH_MODULE(ValueModel);

// Copies the policy's backbone ("model.*") into the critic; the value head
// keeps its zero initialisation so V starts at 0 everywhere.
void init_value_from_policy(ValueModel& value_model, const CausalLM& policy);

// Deep copy of a policy (same config, weights cloned): a rollout replica.
CausalLM clone_policy(const CausalLM& policy);
ValueModel clone_value_model(const ValueModel& value_model);

// Parameter groups, so a group can be frozen (e.g. the critic's attention).
enum class ParamGroup { kAttention, kMlp, kNorm, kEmbedding, kHead };
const char* param_group_name(ParamGroup group);
// Throws sao::Error for an unknown name ("attention", "mlp", "norm", "embedding", "head").
ParamGroup param_group_from_name(const std::string& name);
ParamGroup param_group_of(const std::string& parameter_name);
// Sets requires_grad on every parameter of the group; returns how many
// tensors were changed. Throws sao::Error if the module has no parameter in
// that group (freezing nothing must never pass silently).
int64_t set_group_trainable(torch::nn::Module& module, ParamGroup group, bool trainable);

// Deterministic initialisation (normal(0, 0.02) for matrices, 1 for norms).
void init_weights(torch::nn::Module& module, uint64_t seed);

}  // namespace sao::model
