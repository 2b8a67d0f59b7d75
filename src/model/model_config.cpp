// Validation and HF config.json (de)serialisation of ModelConfig.
#include "model/model_config.hpp"

#include "base/error.hpp"
#include "base/json_parse.hpp"
#include "base/json_reader.hpp"

#include <nlohmann/json.hpp>

#include <cmath>

namespace sao::model {

namespace {
void require(bool condition, const std::string& source, const std::string& message) {
  if (!condition) throw Error(source + ": " + message);
}

void require_in_range(const std::string& source, const char* key, int64_t value, int64_t max) {
  require(value >= 1 && value <= max, source,
          std::string(key) + " must be in [1, " + std::to_string(max) + "], got " + std::to_string(value));
}
}  // namespace

void ModelConfig::validate(const std::string& source) const {
  require(model_type == "llama" || model_type == "qwen2", source,
          "model_type must be \"llama\" or \"qwen2\", got \"" + model_type + "\"");
  require_in_range(source, "vocab_size", vocab_size, kMaxVocabSize);
  require_in_range(source, "hidden_size", hidden_size, kMaxHiddenSize);
  require_in_range(source, "intermediate_size", intermediate_size, kMaxIntermediateSize);
  require_in_range(source, "num_hidden_layers", num_hidden_layers, kMaxHiddenLayers);
  require_in_range(source, "num_attention_heads", num_attention_heads, kMaxAttentionHeads);
  require_in_range(source, "num_key_value_heads", num_key_value_heads, kMaxAttentionHeads);
  require_in_range(source, "max_position_embeddings", max_position_embeddings, kMaxPositionEmbeddings);
  require(hidden_size % num_attention_heads == 0, source,
          "hidden_size (" + std::to_string(hidden_size) + ") must be a multiple of num_attention_heads (" +
              std::to_string(num_attention_heads) + ")");
  require(head_dim() % 2 == 0, source,
          "head_dim (hidden_size / num_attention_heads) must be even for rotary embeddings");
  require(num_attention_heads % num_key_value_heads == 0, source,
          "num_attention_heads (" + std::to_string(num_attention_heads) +
              ") must be a multiple of num_key_value_heads (" + std::to_string(num_key_value_heads) + ")");
  require(std::isfinite(rms_norm_eps) && rms_norm_eps > 0, source, "rms_norm_eps must be positive and finite");
  require(std::isfinite(rope_theta) && rope_theta > 0, source, "rope_theta must be positive and finite");
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

std::vector<std::string> unsupported_hf_config_keys(const nlohmann::json& json) {
  if (!json.is_object()) return {"(top level): expected a JSON object"};
  std::vector<std::string> problems;
  auto present = [&](const char* key) { return json.contains(key) && !json.at(key).is_null(); };
  // Typed reads that never throw: a value of the wrong type reads as the
  // fallback (model_config_from_json reports the type error by key).
  auto text = [&](const nlohmann::json& object, const char* key, const std::string& fallback) {
    return object.contains(key) && object.at(key).is_string() ? object.at(key).get<std::string>() : fallback;
  };
  auto number = [&](const char* key, double fallback) {
    return json.contains(key) && json.at(key).is_number() ? json.at(key).get<double>() : fallback;
  };
  auto flag = [&](const char* key, bool fallback) {
    return json.contains(key) && json.at(key).is_boolean() ? json.at(key).get<bool>() : fallback;
  };
  const std::string model_type = text(json, "model_type", "llama");
  if (model_type != "llama" && model_type != "qwen2") {
    problems.push_back("model_type: \"" + model_type +
                       "\" is not implemented (sao computes llama and qwen2; qwen3 needs q/k RMSNorm, mistral a "
                       "sliding window)");
  }
  if (present("rope_scaling")) {
    const auto& scaling = json.at("rope_scaling");
    const std::string type = text(scaling, "rope_type", text(scaling, "type", "?"));
    problems.push_back("rope_scaling: type \"" + type +
                       "\" is not implemented (positions would be rotated differently)");
  }
  // Qwen2 configs carry a window that use_sliding_window leaves off.
  const bool window_on = flag("use_sliding_window", model_type != "qwen2");
  if (present("sliding_window") && window_on && json.at("sliding_window").is_number() &&
      number("sliding_window", 0) < number("max_position_embeddings", 0))
    problems.push_back("sliding_window: " + base::dump_json(json.at("sliding_window")) +
                       " is active and not implemented (attention would see more than the model was trained on)");
  if (present("hidden_act") && json.at("hidden_act") != "silu")
    problems.push_back("hidden_act: " + base::dump_json(json.at("hidden_act")) + " is not implemented (silu only)");
  const double heads = number("num_attention_heads", 0);
  if (present("head_dim") && heads > 0 && number("head_dim", 0) * heads != number("hidden_size", 0))
    problems.push_back("head_dim: " + base::dump_json(json.at("head_dim")) +
                       " differs from hidden_size / num_attention_heads, which is not implemented");
  if (flag("mlp_bias", false)) problems.push_back("mlp_bias: true is not implemented");
  return problems;
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

void require_same_model(const ModelConfig& configured, const std::string& configured_where, const ModelConfig& loaded,
                        const std::string& loaded_where) {
  const auto want = model_config_settings_to_json(configured);
  const auto have = model_config_settings_to_json(loaded);
  std::string differences;
  for (const auto& [key, value] : have.items()) {
    if (want.contains(key) && want[key] == value) continue;
    if (!differences.empty()) differences += ", ";
    differences += "model." + key + " is " + (want.contains(key) ? base::dump_json(want[key]) : "unset") + " in " +
                   configured_where + " but " + base::dump_json(value) + " in " + loaded_where;
  }
  if (!differences.empty()) {
    throw Error("the run's model does not match its weights: " + differences +
                " (every actor builds the model from the run config; make the model section match the checkpoint)");
  }
}

}  // namespace sao::model
