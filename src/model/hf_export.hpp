// Writes a policy as a Hugging Face model directory that transformers (and
// sao) load again: config.json, the weights in one model.safetensors or in
// shards with model.safetensors.index.json, generation_config.json, and the
// tokenizer files copied through. The names follow transformers'
// save_pretrained so tools that look for them find them.
#pragma once

#include "model/transformer.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace sao::model {

struct HfExportOptions {
  torch::ScalarType dtype = torch::kFloat32;  // F32, F16 or BF16 on disk
  // Above this many bytes of weights the files are sharded, as
  // save_pretrained does ("5GB" is its default).
  std::uint64_t max_shard_bytes = 5'000'000'000ull;
  std::vector<std::string> copy_files;                    // copied verbatim into the directory (tokenizer files)
  std::map<std::string, nlohmann::json> generated_files;  // name -> JSON written into the directory
  nlohmann::json generation_config;                       // written as generation_config.json unless null
};

struct HfExportReport {
  std::vector<std::string> weight_files;  // names inside the directory
  std::uint64_t weight_bytes = 0;
};

// Writes the whole directory next to `out_dir` and swaps it in
// (write_directory_atomically), so a failure leaves any earlier export
// whole. Throws sao::Error for another dtype, a shard limit of 0, or a file
// to copy that is missing.
HfExportReport export_hf_directory(const CausalLM& policy, const std::string& out_dir, const HfExportOptions& options);

// The safetensors dtype name a `--dtype` word stands for: "fp32"/"float32",
// "fp16"/"float16", "bf16"/"bfloat16". Throws sao::Error naming the choices.
torch::ScalarType export_dtype_from_name(const std::string& name);

}  // namespace sao::model
