// Architecture hyper-parameters of the decoder-only transformer. Field names
// are the Hugging Face `config.json` keys of Llama/Qwen2 models, so a real
// checkpoint's config can be read without renaming anything.
#pragma once

#include "model/lora_config.hpp"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace sao::model {

// Upper bounds on the sizes. Far above anything this runtime trains or
// serves on a CPU (Llama-3-405B: 126 layers, hidden 16384, intermediate
// 53248, 128 heads, vocab 128256), yet low enough that a corrupt or hostile
// config.json cannot ask for a model that takes hours to build or more
// memory than the machine has (100000 layers, hidden_size 65536).
inline constexpr int64_t kMaxVocabSize = 1 << 20;
inline constexpr int64_t kMaxHiddenSize = 16384;
inline constexpr int64_t kMaxIntermediateSize = 65536;
inline constexpr int64_t kMaxHiddenLayers = 256;
inline constexpr int64_t kMaxAttentionHeads = 256;
inline constexpr int64_t kMaxPositionEmbeddings = 1 << 20;
inline constexpr int64_t kMaxHeadDim = 1024;

// Rotary frequency scaling for long contexts ("rope_scaling" in config.json).
// Only the kinds whose frequencies sao reproduces exactly are accepted.
struct RopeScaling {
  std::string type;  // "" (none), "linear" or "llama3"
  double factor = 1.0;
  // llama3 only: the band of wavelengths that is interpolated smoothly.
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;

  bool operator==(const RopeScaling& other) const;
};

// Where a config comes from decides the defaults of keys it leaves out: a
// run config's "model" section keeps sao's (tied embeddings, no unknown
// keys), a Hugging Face config.json gets the transformers library's (untied
// unless it says so) and may carry keys sao does not use.
enum class ConfigKind { kRunConfig, kHuggingFace };

struct ModelConfig {
  // "llama", "mistral" (the llama layout), "qwen2" (attention bias) or
  // "qwen3" (RMSNorm on each head's queries and keys).
  std::string model_type = "llama";
  int64_t vocab_size = 264;
  int64_t hidden_size = 128;
  int64_t intermediate_size = 352;
  int64_t num_hidden_layers = 4;
  int64_t num_attention_heads = 4;
  int64_t num_key_value_heads = 2;
  int64_t max_position_embeddings = 128;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  bool tie_word_embeddings = true;
  bool attention_bias = false;
  // "head_dim" in config.json; 0 means hidden_size / num_attention_heads.
  // Qwen3 sets it apart from that ratio (1024 hidden, 16 heads, head_dim 128).
  int64_t explicit_head_dim = 0;
  RopeScaling rope_scaling;
  // A run config's "lora" section: adapters on the policy (model/lora.hpp).
  // Never in a Hugging Face config.json; a checkpoint keeps it in its PEFT
  // adapter_config.json.
  LoraConfig lora;

  int64_t head_dim() const { return explicit_head_dim > 0 ? explicit_head_dim : hidden_size / num_attention_heads; }
  bool qk_norm() const { return model_type == "qwen3"; }

  // Throws sao::Error naming `source` and the offending key; sizes out of
  // [1, kMax...] name the allowed range.
  void validate(const std::string& source) const;
  // Parameter count of a policy with this config (LM head counted once if tied).
  int64_t parameter_count() const;
  // Parameters of the LoRA adapters (0 without): what a LoRA policy trains.
  int64_t lora_parameter_count() const;
  // What the learner trains of the policy: the adapters, or every parameter.
  int64_t trainable_parameter_count() const { return lora.enabled() ? lora_parameter_count() : parameter_count(); }
};

// Reads HF-style keys. For kRunConfig unknown keys are an error; for
// kHuggingFace they are ignored (real configs carry many keys this runtime
// does not use), so callers check unsupported_hf_config_keys first.
ModelConfig model_config_from_json(const nlohmann::json& json, const std::string& source, ConfigKind kind);
// What in a Hugging Face config.json would make sao compute a different
// model than the one the file describes: one "key: reason" line per such
// key (an unsupported model_type or rope_scaling type, an active sliding
// window, another activation, biases in the MLP, partial rotary embeddings).
// Empty when model_config_from_json's fields describe the model fully.
std::vector<std::string> unsupported_hf_config_keys(const nlohmann::json& json);

// Exactly the keys model_config_from_json reads (a run config's "model" section).
nlohmann::json model_config_settings_to_json(const ModelConfig& config);
// The settings plus what Hugging Face tools expect in a checkpoint's config.json.
nlohmann::json model_config_to_json(const ModelConfig& config);

// The learner trains the weights it loaded while rollout actors (here and on
// other nodes) build their model from the run config, so the two must be the
// same shape. Throws sao::Error listing every key that differs, with both
// values and where each came from.
void require_same_model(const ModelConfig& configured, const std::string& configured_where, const ModelConfig& loaded,
                        const std::string& loaded_where);

}  // namespace sao::model
