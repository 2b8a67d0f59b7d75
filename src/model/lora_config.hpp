// Low-rank adapters (LoRA, Hu et al. 2021) for the policy: what a run
// config's `model.lora` section and a PEFT adapter_config.json say. The
// adapters themselves live beside their projections (transformer.hpp) and
// their files are written and read by model/lora.hpp.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace sao::model {

// The highest rank accepted: far above any useful adapter (the paper uses
// 1-64), low enough that a hostile file cannot ask for a full-size copy.
inline constexpr int64_t kMaxLoraRank = 4096;

struct LoraConfig {
  int64_t rank = 0;  // r; 0: no adapters (full fine-tuning)
  double alpha = 16.0;
  double dropout = 0.0;  // on the adapter's input, in training passes only
  // Projections that get an adapter, by their Hugging Face module names.
  std::vector<std::string> targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

  bool enabled() const { return rank > 0; }
  // What multiplies B A x (PEFT's `scaling` without rsLoRA: alpha / r).
  double scaling() const { return alpha / static_cast<double>(rank); }
  bool targets_projection(const std::string& projection) const;
  bool operator==(const LoraConfig& other) const;
  bool operator!=(const LoraConfig& other) const { return !(*this == other); }
  // Throws sao::Error naming `source`: rank in [1, kMaxLoraRank] (or 0),
  // alpha in (0, 1e6], dropout in [0, 1), targets known and not repeated.
  void validate(const std::string& source) const;
};

// Whether a tensor name is a LoRA adapter's ("...q_proj.lora_A.weight").
bool is_lora_tensor_name(const std::string& name);

// Every projection sao can adapt, in layer order.
const std::vector<std::string>& lora_projection_names();

// A run config's `model.lora` section: {rank, alpha, dropout, targets};
// unknown keys are an error naming the nearest known one.
LoraConfig lora_config_from_run_json(const nlohmann::json& json, const std::string& source);
nlohmann::json lora_config_to_run_json(const LoraConfig& config);

// PEFT's adapter_config.json for these adapters (peft_type LORA,
// task_type CAUSAL_LM, r, lora_alpha, lora_dropout, target_modules, bias
// "none", ...). `base_model` is base_model_name_or_path ("" writes null).
nlohmann::json peft_adapter_config_json(const LoraConfig& config, const std::string& base_model);
// Reads a PEFT adapter_config.json. Options sao does not compute the same
// way (rsLoRA, DoRA, per-module rank or alpha patterns, fan_in_fan_out,
// trained biases, modules_to_save, layer subsets, another peft_type) are
// refused by name, never ignored: they would change the model.
LoraConfig lora_config_from_peft_json(const nlohmann::json& json, const std::string& source);

}  // namespace sao::model
