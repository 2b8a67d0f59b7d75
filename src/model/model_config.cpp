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

bool RopeScaling::operator==(const RopeScaling& other) const {
  return type == other.type && factor == other.factor && low_freq_factor == other.low_freq_factor &&
         high_freq_factor == other.high_freq_factor &&
         original_max_position_embeddings == other.original_max_position_embeddings;
}

namespace {
bool known_model_type(const std::string& type) {
  return type == "llama" || type == "mistral" || type == "qwen2" || type == "qwen3";
}

void validate_rope_scaling(const RopeScaling& scaling, const std::string& source) {
  if (scaling.type.empty()) return;
  require(scaling.type == "linear" || scaling.type == "llama3", source,
          "rope_scaling type must be \"linear\" or \"llama3\", got \"" + scaling.type + "\"");
  require(std::isfinite(scaling.factor) && scaling.factor > 0 && scaling.factor <= 1e6, source,
          "rope_scaling.factor must be in (0, 1e6]");
  if (scaling.type != "llama3") return;
  require(std::isfinite(scaling.low_freq_factor) && std::isfinite(scaling.high_freq_factor) &&
              scaling.low_freq_factor > 0 && scaling.high_freq_factor > scaling.low_freq_factor,
          source, "rope_scaling needs 0 < low_freq_factor < high_freq_factor");
  require_in_range(source, "rope_scaling.original_max_position_embeddings", scaling.original_max_position_embeddings,
                   kMaxPositionEmbeddings);
}
}  // namespace

void ModelConfig::validate(const std::string& source) const {
  require(known_model_type(model_type), source,
          "model_type must be \"llama\", \"mistral\", \"qwen2\" or \"qwen3\", got \"" + model_type + "\"");
  require_in_range(source, "vocab_size", vocab_size, kMaxVocabSize);
  require_in_range(source, "hidden_size", hidden_size, kMaxHiddenSize);
  require_in_range(source, "intermediate_size", intermediate_size, kMaxIntermediateSize);
  require_in_range(source, "num_hidden_layers", num_hidden_layers, kMaxHiddenLayers);
  require_in_range(source, "num_attention_heads", num_attention_heads, kMaxAttentionHeads);
  require_in_range(source, "num_key_value_heads", num_key_value_heads, kMaxAttentionHeads);
  require_in_range(source, "max_position_embeddings", max_position_embeddings, kMaxPositionEmbeddings);
  if (explicit_head_dim == 0) {
    require(hidden_size % num_attention_heads == 0, source,
            "hidden_size (" + std::to_string(hidden_size) + ") must be a multiple of num_attention_heads (" +
                std::to_string(num_attention_heads) + ")");
  } else {
    require_in_range(source, "head_dim", explicit_head_dim, kMaxHeadDim);
  }
  require(head_dim() % 2 == 0, source,
          "head_dim must be even for rotary embeddings, got " + std::to_string(head_dim()));
  require(num_attention_heads % num_key_value_heads == 0, source,
          "num_attention_heads (" + std::to_string(num_attention_heads) +
              ") must be a multiple of num_key_value_heads (" + std::to_string(num_key_value_heads) + ")");
  require(std::isfinite(rms_norm_eps) && rms_norm_eps > 0, source, "rms_norm_eps must be positive and finite");
  require(std::isfinite(rope_theta) && rope_theta > 0, source, "rope_theta must be positive and finite");
  validate_rope_scaling(rope_scaling, source);
  lora.validate(source);
}

int64_t ModelConfig::parameter_count() const {
  const int64_t q_dim = num_attention_heads * head_dim();
  const int64_t kv_dim = num_key_value_heads * head_dim();
  const int64_t attention = hidden_size * q_dim * 2 + hidden_size * kv_dim * 2 +
                            (attention_bias ? q_dim + 2 * kv_dim : 0) + (qk_norm() ? 2 * head_dim() : 0);
  const int64_t mlp = 3 * hidden_size * intermediate_size;
  const int64_t norms = 2 * hidden_size;
  const int64_t embedding = vocab_size * hidden_size;
  return num_hidden_layers * (attention + mlp + norms) + hidden_size + embedding +
         (tie_word_embeddings ? 0 : embedding);
}

int64_t ModelConfig::lora_parameter_count() const {
  if (!lora.enabled()) return 0;
  const int64_t q_dim = num_attention_heads * head_dim();
  const int64_t kv_dim = num_key_value_heads * head_dim();
  const std::pair<const char*, std::pair<int64_t, int64_t>> shapes[] = {
      {"q_proj", {hidden_size, q_dim}},
      {"k_proj", {hidden_size, kv_dim}},
      {"v_proj", {hidden_size, kv_dim}},
      {"o_proj", {q_dim, hidden_size}},
      {"gate_proj", {hidden_size, intermediate_size}},
      {"up_proj", {hidden_size, intermediate_size}},
      {"down_proj", {intermediate_size, hidden_size}}};
  int64_t per_layer = 0;
  for (const auto& [name, in_out] : shapes)
    if (lora.targets_projection(name)) per_layer += lora.rank * (in_out.first + in_out.second);
  return num_hidden_layers * per_layer;
}

namespace {
using base::IntRange;
using base::RealRange;
constexpr RealRange kScalingFactor{0.0, 1e6, true, false};

// The keys a run config's "model" section and a checkpoint's config.json
// share, listed once for reading and writing.
template <typename Config, typename Visit>
void model_keys(Config& config, Visit visit) {
  visit("model_type", config.model_type);
  visit("vocab_size", config.vocab_size, IntRange{1, kMaxVocabSize});
  visit("hidden_size", config.hidden_size, IntRange{1, kMaxHiddenSize});
  visit("intermediate_size", config.intermediate_size, IntRange{1, kMaxIntermediateSize});
  visit("num_hidden_layers", config.num_hidden_layers, IntRange{1, kMaxHiddenLayers});
  visit("num_attention_heads", config.num_attention_heads, IntRange{1, kMaxAttentionHeads});
  visit("num_key_value_heads", config.num_key_value_heads, IntRange{1, kMaxAttentionHeads});
  visit("max_position_embeddings", config.max_position_embeddings, IntRange{1, kMaxPositionEmbeddings});
  visit("rms_norm_eps", config.rms_norm_eps, RealRange{0.0, 1.0, true, false});
  visit("rope_theta", config.rope_theta, RealRange{0.0, 1e9, true, false});
  visit("tie_word_embeddings", config.tie_word_embeddings);
  visit("attention_bias", config.attention_bias);
}
}  // namespace

namespace {
RopeScaling read_rope_scaling(base::JsonReader reader, ConfigKind kind) {
  RopeScaling scaling;
  std::string type;
  reader.read("rope_type", type);
  if (type.empty()) reader.read("type", type);  // the older spelling
  scaling.type = type == "default" ? "" : type;
  reader.read("factor", scaling.factor, kScalingFactor);
  reader.read("low_freq_factor", scaling.low_freq_factor, kScalingFactor);
  reader.read("high_freq_factor", scaling.high_freq_factor, kScalingFactor);
  reader.read("original_max_position_embeddings", scaling.original_max_position_embeddings,
              IntRange{1, kMaxPositionEmbeddings});
  if (kind == ConfigKind::kRunConfig) reader.reject_unknown_keys();
  return scaling;
}

nlohmann::json rope_scaling_to_json(const RopeScaling& scaling) {
  nlohmann::json json = {{"rope_type", scaling.type}, {"factor", scaling.factor}};
  if (scaling.type == "llama3") {
    json["low_freq_factor"] = scaling.low_freq_factor;
    json["high_freq_factor"] = scaling.high_freq_factor;
    json["original_max_position_embeddings"] = scaling.original_max_position_embeddings;
  }
  return json;
}
}  // namespace

ModelConfig model_config_from_json(const nlohmann::json& json, const std::string& source, ConfigKind kind) {
  ModelConfig config;
  // transformers writes `null` for a key at its default.
  nlohmann::json present = json;
  if (present.is_object()) {
    for (const char* key : {"rope_scaling", "head_dim", "tie_word_embeddings", "num_key_value_heads"})
      if (present.contains(key) && present[key].is_null()) present.erase(key);
  }
  base::JsonReader reader(present, source);
  model_keys(config, base::ReadKeys{reader});
  reader.read("head_dim", config.explicit_head_dim, IntRange{1, kMaxHeadDim});
  if (reader.has("rope_scaling")) config.rope_scaling = read_rope_scaling(reader.section("rope_scaling"), kind);
  if (kind == ConfigKind::kRunConfig && reader.has("lora")) {
    reader.mark_known("lora");
    config.lora = lora_config_from_run_json(present["lora"], source);
  }
  // Hugging Face's defaults for configs that leave these out.
  if (!reader.has("num_key_value_heads")) config.num_key_value_heads = config.num_attention_heads;
  if (!reader.has("attention_bias") && config.model_type == "qwen2") config.attention_bias = true;
  if (kind == ConfigKind::kHuggingFace && !reader.has("tie_word_embeddings")) config.tie_word_embeddings = false;
  // An explicit head_dim equal to the ratio is the same model; keeping 0
  // makes configs that spell it and configs that do not compare equal.
  if (config.num_attention_heads > 0 && config.explicit_head_dim * config.num_attention_heads == config.hidden_size)
    config.explicit_head_dim = 0;
  if (kind == ConfigKind::kRunConfig) reader.reject_unknown_keys();
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
  if (!known_model_type(model_type)) {
    problems.push_back("model_type: \"" + model_type +
                       "\" is not implemented (sao computes llama, mistral, qwen2 and qwen3)");
  }
  if (present("rope_scaling")) {
    const auto& scaling = json.at("rope_scaling");
    const std::string type = text(scaling, "rope_type", text(scaling, "type", "?"));
    if (type != "default" && type != "linear" && type != "llama3")
      problems.push_back("rope_scaling: type \"" + type +
                         "\" is not implemented (sao rotates positions as default, linear and llama3 do)");
  }
  if (present("partial_rotary_factor") && number("partial_rotary_factor", 1.0) != 1.0)
    problems.push_back("partial_rotary_factor: " + base::dump_json(json.at("partial_rotary_factor")) +
                       " is not implemented (sao rotates every dimension of a head)");
  // Qwen2/Qwen3 configs carry a window that use_sliding_window leaves off.
  const bool window_on = flag("use_sliding_window", model_type != "qwen2" && model_type != "qwen3");
  if (present("sliding_window") && window_on && json.at("sliding_window").is_number() &&
      number("sliding_window", 0) < number("max_position_embeddings", 0))
    problems.push_back("sliding_window: " + base::dump_json(json.at("sliding_window")) +
                       " is active and not implemented (attention would see more than the model was trained on)");
  if (present("hidden_act") && json.at("hidden_act") != "silu")
    problems.push_back("hidden_act: " + base::dump_json(json.at("hidden_act")) + " is not implemented (silu only)");
  if (flag("mlp_bias", false)) problems.push_back("mlp_bias: true is not implemented");
  return problems;
}

nlohmann::json model_config_settings_to_json(const ModelConfig& config) {
  nlohmann::json json = nlohmann::json::object();
  model_keys(config, base::WriteKeys{json});
  // Written only when set, so a config without them stays the one it was.
  if (config.explicit_head_dim > 0) json["head_dim"] = config.explicit_head_dim;
  if (!config.rope_scaling.type.empty()) json["rope_scaling"] = rope_scaling_to_json(config.rope_scaling);
  if (config.lora.enabled()) json["lora"] = lora_config_to_run_json(config.lora);
  return json;
}

nlohmann::json model_config_to_json(const ModelConfig& config) {
  auto json = model_config_settings_to_json(config);
  json.erase("lora");  // a PEFT adapter_config.json carries it (model/lora.hpp)
  const char* architecture = config.model_type == "qwen2"     ? "Qwen2ForCausalLM"
                             : config.model_type == "qwen3"   ? "Qwen3ForCausalLM"
                             : config.model_type == "mistral" ? "MistralForCausalLM"
                                                              : "LlamaForCausalLM";
  json["architectures"] = nlohmann::json::array({architecture});
  if (config.model_type == "qwen3" || config.model_type == "qwen2") json["use_sliding_window"] = false;
  if (config.model_type == "mistral") json["sliding_window"] = nullptr;
  json["hidden_act"] = "silu";
  json["torch_dtype"] = "float32";
  return json;
}

void require_same_model(const ModelConfig& configured, const std::string& configured_where, const ModelConfig& loaded,
                        const std::string& loaded_where) {
  const auto want = model_config_settings_to_json(configured);
  const auto have = model_config_settings_to_json(loaded);
  std::string differences;
  auto keys = want;
  keys.update(have);  // head_dim and rope_scaling appear only where set
  for (const auto& item : keys.items()) {
    const auto& key = item.key();
    if (want.contains(key) && have.contains(key) && want[key] == have[key]) continue;
    if (!differences.empty()) differences += ", ";
    differences += "model." + key + " is " + (want.contains(key) ? base::dump_json(want[key]) : "unset") + " in " +
                   configured_where + " but " + (have.contains(key) ? base::dump_json(have[key]) : "unset") + " in " +
                   loaded_where;
  }
  if (!differences.empty()) {
    throw Error("the run's model does not match its weights: " + differences +
                " (every actor builds the model from the run config; make the model section match the checkpoint)");
  }
}

}  // namespace sao::model
