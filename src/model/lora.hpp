// LoRA adapters on a policy: their tensors, their initialisation, merging
// them into the base weights, and their files in PEFT's layout
// (adapter_config.json + adapter_model.safetensors, tensor names
// "base_model.model.<sao name>"), which Hugging Face PEFT loads with
// PeftModel.from_pretrained(base, DIR). Where adapters sit in the model:
// transformer.hpp (LoraPath, CausalLM::attach_lora).
#pragma once

#include "model/lora_config.hpp"
#include "model/safetensors.hpp"
#include "model/transformer.hpp"

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace sao::model {

inline constexpr const char* kPeftConfigFile = "adapter_config.json";
inline constexpr const char* kPeftWeightsFile = "adapter_model.safetensors";
// The prefix PEFT's PeftModelForCausalLM puts before the base model's names.
inline constexpr const char* kPeftTensorPrefix = "base_model.model.";

// The adapters' tensors (names ending in lora_A.weight / lora_B.weight), in
// registration order; empty without adapters.
NamedTensors lora_tensors(const torch::nn::Module& module);
// Every other parameter and buffer: what a LoRA policy keeps frozen.
NamedTensors base_tensors(const torch::nn::Module& module);

// Keeps every frozen parameter of `policy` (a LoRA policy's base) in
// `dtype`, in place; the adapters keep theirs. `project` runs each adapter
// in its own dtype and adds its term in the base's.
void store_frozen_base_as(CausalLM& policy, torch::ScalarType dtype);
// Whether any of the policy's parameters is stored in another dtype than fp32.
bool has_low_precision_tensors(const torch::nn::Module& module);
// The module's tensors (named_tensors_of), each converted to fp32: exact
// for bf16 and fp16 values.
NamedTensors named_tensors_as_fp32(const torch::nn::Module& module);

// Draws every adapter's A from `seed` as PEFT does (Kaiming-uniform, bound
// 1/sqrt(in)) and zeroes every B: the policy computes what its base does.
void init_lora(CausalLM& policy, uint64_t seed);

// A policy without adapters whose projections are W + scaling * B A: the
// same function (to float rounding), loadable by anything that reads a
// plain checkpoint. A policy without adapters is returned as a copy.
CausalLM merge_lora(const CausalLM& policy);

// Writes adapter_config.json and adapter_model.safetensors into `dir` (an
// existing directory). `base_model` goes to base_model_name_or_path.
// Throws sao::Error if the policy has no adapters.
void write_peft_adapter(const std::string& dir, const CausalLM& policy, const std::string& base_model);
// Whether `dir` holds adapter_config.json.
bool has_peft_adapter(const std::string& dir);
// adapter_config.json of `dir`, checked (lora_config_from_peft_json).
LoraConfig read_peft_adapter_config(const std::string& dir);
// Attaches the adapters `dir` describes to `policy` (a policy without
// adapters, its base weights loaded) and loads their tensors. Every tensor
// the config implies must be in the file with its shape, and nothing else:
// a missing, extra or misshapen tensor (or a NaN) is an error naming it, and
// nothing is attached then.
void load_peft_adapter(CausalLM& policy, const std::string& dir);

}  // namespace sao::model
