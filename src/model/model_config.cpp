// Validation and HF config.json (de)serialisation of ModelConfig.
#include "model/model_config.hpp"

#include "base/error.hpp"
#include "base/json_reader.hpp"

#include <nlohmann/json.hpp>

namespace sao::model {

namespace {
void require(bool condition, const std::string& source, const std::string& message) {
  if (!condition) throw Error(source + ": " + message);
}
}  // namespace

void ModelConfig::validate(const std::string& source) const {
  require(model_type == "llama" || model_type == "qwen2", source,
          "model_type must be \"llama\" or \"qwen2\", got \"" + model_type + "\"");
  require(vocab_size > 0, source, "vocab_size must be positive");
  require(hidden_size > 0, source, "hidden_size must be positive");
  require(intermediate_size > 0, source, "intermediate_size must be positive");
  require(num_hidden_layers > 0, source, "num_hidden_layers must be positive");
  require(num_attention_heads > 0 && hidden_size % num_attention_heads == 0, source,
          "hidden_size (" + std::to_string(hidden_size) + ") must be a multiple of num_attention_heads (" +
              std::to_string(num_attention_heads) + ")");
  require(head_dim() % 2 == 0, source,
          "head_dim (hidden_size / num_attention_heads) must be even for rotary embeddings");
  require(num_key_value_heads > 0 && num_attention_heads % num_key_value_heads == 0, source,
          "num_attention_heads (" + std::to_string(num_attention_heads) +
              ") must be a multiple of num_key_value_heads (" + std::to_string(num_key_value_heads) + ")");
  require(max_position_embeddings > 0, source, "max_position_embeddings must be positive");
  require(rms_norm_eps > 0, source, "rms_norm_eps must be positive");
  require(rope_theta > 0, source, "rope_theta must be positive");
}

int64_t ModelConfig::parameter_count() const {
  const int64_t kv_dim = num_key_value_heads * head_dim();
  const int64_t attention =
      hidden_size * hidden_size * 2 + hidden_size * kv_dim * 2 + (attention_bias ? hidden_size + 2 * kv_dim : 0);
  const int64_t mlp = 3 * hidden_size * intermediate_size;
  const int64_t norms = 2 * hidden_size;
  const int64_t embedding = vocab_size * hidden_size;
  return num_hidden_layers * (attention + mlp + norms) + hidden_size + embedding +
         (tie_word_embeddings ? 0 : embedding);
}

namespace {
// The keys a run config's "model" section and a checkpoint's config.json
// share, listed once for reading and writing.
template <typename Config, typename Visit>
void model_keys(Config& config, Visit visit) {
  visit("model_type", config.model_type);
  visit("vocab_size", config.vocab_size);
  visit("hidden_size", config.hidden_size);
  visit("intermediate_size", config.intermediate_size);
  visit("num_hidden_layers", config.num_hidden_layers);
  visit("num_attention_heads", config.num_attention_heads);
  visit("num_key_value_heads", config.num_key_value_heads);
  visit("max_position_embeddings", config.max_position_embeddings);
  visit("rms_norm_eps", config.rms_norm_eps);
  visit("rope_theta", config.rope_theta);
  visit("tie_word_embeddings", config.tie_word_embeddings);
  visit("attention_bias", config.attention_bias);
}
}  // namespace

ModelConfig model_config_from_json(const nlohmann::json& json, const std::string& source, bool allow_unknown_keys) {
  ModelConfig config;
  base::JsonReader reader(json, source);
  model_keys(config, base::ReadKeys{reader});
  // Hugging Face's defaults for configs that leave these out.
  if (!reader.has("num_key_value_heads")) config.num_key_value_heads = config.num_attention_heads;
  if (!reader.has("attention_bias") && config.model_type == "qwen2") config.attention_bias = true;
  if (!allow_unknown_keys) reader.reject_unknown_keys();
  config.validate(source);
  return config;
}

nlohmann::json model_config_settings_to_json(const ModelConfig& config) {
  nlohmann::json json = nlohmann::json::object();
  model_keys(config, base::WriteKeys{json});
  return json;
}

nlohmann::json model_config_to_json(const ModelConfig& config) {
  auto json = model_config_settings_to_json(config);
  json["architectures"] =
      nlohmann::json::array({config.model_type == "qwen2" ? "Qwen2ForCausalLM" : "LlamaForCausalLM"});
  json["hidden_act"] = "silu";
  json["torch_dtype"] = "float32";
  return json;
}

}  // namespace sao::model
