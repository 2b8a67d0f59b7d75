// LoRA settings; see lora_config.hpp.
#include "model/lora_config.hpp"

#include "base/error.hpp"
#include "base/json_reader.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>

namespace sao::model {

namespace {
using base::IntRange;
using base::RealRange;

const RealRange kAlphaRange{0.0, 1e6, true, false};
const RealRange kDropoutRange{0.0, 1.0, false, true};

std::string joined(const std::vector<std::string>& names) {
  std::string text;
  for (const auto& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

// True for a PEFT option at its "does nothing" value: false, null, "", {}, [] or "none".
bool neutral(const nlohmann::json& value) {
  if (value.is_null()) return true;
  if (value.is_boolean()) return !value.get<bool>();
  if (value.is_string()) return value.get<std::string>().empty() || value.get<std::string>() == "none";
  if (value.is_object() || value.is_array()) return value.empty();
  return false;
}
}  // namespace

namespace {
// Validated, targets in layer order: two configs naming the same
// projections compare equal whatever order they listed them in.
LoraConfig validated_in_layer_order(LoraConfig config, const std::string& source) {
  config.validate(source);
  std::vector<std::string> ordered;
  for (const auto& name : lora_projection_names())
    if (config.targets_projection(name)) ordered.push_back(name);
  config.targets = ordered;
  return config;
}
}  // namespace

bool is_lora_tensor_name(const std::string& name) {
  return name.find(".lora_A.") != std::string::npos || name.find(".lora_B.") != std::string::npos;
}

const std::vector<std::string>& lora_projection_names() {
  static const std::vector<std::string> names = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                 "gate_proj", "up_proj", "down_proj"};
  return names;
}

bool LoraConfig::targets_projection(const std::string& projection) const {
  return std::find(targets.begin(), targets.end(), projection) != targets.end();
}

bool LoraConfig::operator==(const LoraConfig& other) const {
  if (!enabled() && !other.enabled()) return true;
  return rank == other.rank && alpha == other.alpha && dropout == other.dropout && targets == other.targets;
}

void LoraConfig::validate(const std::string& source) const {
  base::require_in_range(source, "lora.rank", rank, IntRange{0, kMaxLoraRank});
  if (!enabled()) return;
  base::require_in_range(source, "lora.alpha", alpha, kAlphaRange);
  base::require_in_range(source, "lora.dropout", dropout, kDropoutRange);
  if (targets.empty())
    throw Error(source + ": lora.targets is empty (name at least one of " + joined(lora_projection_names()) + ")");
  std::set<std::string> seen;
  for (const auto& target : targets) {
    const auto& known = lora_projection_names();
    if (std::find(known.begin(), known.end(), target) == known.end())
      throw Error(source + ": lora.targets names '" + target + "', which is not a projection sao can adapt (" +
                  joined(known) + ")");
    if (!seen.insert(target).second) throw Error(source + ": lora.targets names '" + target + "' twice");
  }
}

LoraConfig lora_config_from_run_json(const nlohmann::json& json, const std::string& source) {
  LoraConfig config;
  base::JsonReader reader(json, source + ": lora");
  reader.read("rank", config.rank, IntRange{0, kMaxLoraRank});
  reader.read("alpha", config.alpha, kAlphaRange);
  reader.read("dropout", config.dropout, kDropoutRange);
  reader.read("targets", config.targets);
  reader.reject_unknown_keys();
  return validated_in_layer_order(std::move(config), source);
}

nlohmann::json lora_config_to_run_json(const LoraConfig& config) {
  return {{"rank", config.rank}, {"alpha", config.alpha}, {"dropout", config.dropout}, {"targets", config.targets}};
}

nlohmann::json peft_adapter_config_json(const LoraConfig& config, const std::string& base_model) {
  // The fields PEFT's LoraConfig writes, at the values that describe what sao
  // computes: W x + (alpha / r) B A dropout(x) on each target, nothing else trained.
  return {{"peft_type", "LORA"},
          {"task_type", "CAUSAL_LM"},
          {"base_model_name_or_path", base_model.empty() ? nlohmann::json() : nlohmann::json(base_model)},
          {"r", config.rank},
          {"lora_alpha", config.alpha},
          {"lora_dropout", config.dropout},
          {"target_modules", config.targets},
          {"bias", "none"},
          {"fan_in_fan_out", false},
          {"use_rslora", false},
          {"use_dora", false},
          {"init_lora_weights", true},
          {"inference_mode", true},
          {"modules_to_save", nullptr},
          {"layers_to_transform", nullptr},
          {"layers_pattern", nullptr},
          {"rank_pattern", nlohmann::json::object()},
          {"alpha_pattern", nlohmann::json::object()},
          {"revision", nullptr}};
}

LoraConfig lora_config_from_peft_json(const nlohmann::json& json, const std::string& source) {
  if (!json.is_object()) throw Error(source + ": must be a JSON object, got " + std::string(json.type_name()));
  const auto fail = [&](const std::string& message) { throw Error(source + ": " + message); };
  const auto peft_type = json.value("peft_type", nlohmann::json());
  if (peft_type != "LORA") fail("peft_type is " + peft_type.dump() + "; sao reads LORA adapters only");
  // Options that only say where the adapter came from or how it was initialised.
  static const std::set<std::string> descriptive = {"peft_type",    "task_type",       "base_model_name_or_path",
                                                    "revision",     "inference_mode",  "init_lora_weights",
                                                    "auto_mapping", "megatron_core",   "r",
                                                    "lora_alpha",   "lora_dropout",    "target_modules",
                                                    "peft_version", "corda_config",    "eva_config",
                                                    "loftq_config", "megatron_config", "qalora_group_size"};
  for (const auto& item : json.items()) {
    if (descriptive.count(item.key()) > 0) continue;
    // bias "none", fan_in_fan_out, use_rslora, use_dora, rank/alpha
    // patterns, modules_to_save, layers_to_transform, layer_replication,
    // exclude_modules, lora_bias, trainable_token_indices and options of
    // newer PEFTs: each changes the model unless it is at its neutral value.
    if (!neutral(item.value()))
      fail("'" + item.key() + "' is " + item.value().dump() +
           "; sao computes plain LoRA (W x + alpha/r B A x on whole projections) and cannot load adapters that "
           "set it");
  }
  const auto task_type = json.value("task_type", nlohmann::json());
  if (!task_type.is_null() && task_type != "CAUSAL_LM")
    fail("task_type is " + task_type.dump() + "; sao's policy is a CAUSAL_LM");
  LoraConfig config;
  const auto number = [&](const char* key) {
    if (!json.contains(key) || !json[key].is_number()) fail(std::string("'") + key + "' must be a number");
    return json[key].get<double>();
  };
  const double rank = number("r");
  if (!(rank >= 1 && rank <= static_cast<double>(kMaxLoraRank)) ||
      rank != static_cast<double>(static_cast<int64_t>(rank)))
    fail("'r' must be an integer in [1, " + std::to_string(kMaxLoraRank) + "]");
  config.rank = static_cast<int64_t>(rank);
  config.alpha = number("lora_alpha");
  config.dropout = json.contains("lora_dropout") ? number("lora_dropout") : 0.0;
  const auto& targets = json.value("target_modules", nlohmann::json());
  config.targets.clear();
  if (targets == "all-linear") {
    config.targets = lora_projection_names();  // PEFT: every linear layer but the output head
  } else if (targets.is_array()) {
    for (const auto& target : targets) {
      if (!target.is_string()) fail("'target_modules' must list names");
      config.targets.push_back(target.get<std::string>());
    }
  } else {
    fail("'target_modules' is " + targets.dump() + "; sao reads a list of projection names or \"all-linear\"");
  }
  return validated_in_layer_order(std::move(config), source);
}

}  // namespace sao::model
