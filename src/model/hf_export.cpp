// Hugging Face directory export; see hf_export.hpp.
#include "model/hf_export.hpp"

#include "base/error.hpp"
#include "base/json_parse.hpp"
#include "model/checkpoint.hpp"
#include "model/regular_file.hpp"
#include "model/safetensors.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

namespace sao::model {

namespace {
namespace fs = std::filesystem;

const char* torch_dtype_name(torch::ScalarType dtype) {
  if (dtype == torch::kBFloat16) return "bfloat16";
  if (dtype == torch::kHalf) return "float16";
  return "float32";
}

void write_json_file(const fs::path& path, const nlohmann::json& json) {
  std::ofstream out(path);
  out << base::dump_json(json, 2) << "\n";
  if (!out) throw Error("export: cannot write " + path.string());
}

// Copies through RegularFile, so a tokenizer file that is a link out of its
// model directory (or a FIFO) is refused here as it is when loaded.
void copy_model_file(const std::string& from, const fs::path& to) {
  const RegularFile source(from);
  std::ofstream out(to, std::ios::binary | std::ios::trunc);
  std::vector<char> chunk(1 << 20);
  for (std::uint64_t offset = 0; offset < source.size();) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), source.size() - offset));
    source.read_at(offset, chunk.data(), n);
    out.write(chunk.data(), static_cast<std::streamsize>(n));
    offset += n;
  }
  if (!out.flush()) throw Error("export: cannot write " + to.string());
}

std::string shard_name(size_t index, size_t count) {
  char name[64];
  std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return name;
}
}  // namespace

torch::ScalarType export_dtype_from_name(const std::string& name) {
  if (name == "fp32" || name == "float32") return torch::kFloat32;
  if (name == "fp16" || name == "float16") return torch::kHalf;
  if (name == "bf16" || name == "bfloat16") return torch::kBFloat16;
  throw Error("--dtype '" + name + "': expected fp32, fp16 or bf16");
}

HfExportReport export_hf_directory(const CausalLM& policy, const std::string& out_dir, const HfExportOptions& options) {
  if (options.dtype != torch::kFloat32 && options.dtype != torch::kHalf && options.dtype != torch::kBFloat16)
    throw Error("export: dtype must be F32, F16 or BF16");
  if (options.max_shard_bytes == 0) throw Error("export: the shard size must be at least 1 byte");
  for (const auto& file : options.copy_files) {
    if (!fs::is_regular_file(file)) throw Error("export: " + file + " is not a file to copy");
  }
  // Group tensors into shards in registration order, as save_pretrained does:
  // a shard closes before the tensor that would take it over the limit.
  std::vector<NamedTensors> shards(1);
  std::uint64_t shard_bytes = 0;
  HfExportReport report;
  for (const auto& [name, tensor] : named_tensors_of(*policy)) {
    const auto bytes = static_cast<std::uint64_t>(tensor.numel()) * c10::elementSize(options.dtype);
    if (!shards.back().empty() && shard_bytes + bytes > options.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().emplace_back(name, tensor.detach().to(options.dtype));
    shard_bytes += bytes;
    report.weight_bytes += bytes;
  }
  write_directory_atomically(out_dir, [&](const std::string& staging) {
    const fs::path dir(staging);
    auto config = model_config_to_json(policy->config());
    config["torch_dtype"] = torch_dtype_name(options.dtype);
    write_json_file(dir / "config.json", config);
    nlohmann::json weight_map = nlohmann::json::object();
    report.weight_files.clear();
    for (size_t i = 0; i < shards.size(); ++i) {
      const std::string name = shards.size() == 1 ? "model.safetensors" : shard_name(i, shards.size());
      save_safetensors((dir / name).string(), shards[i], {{"format", "pt"}});
      report.weight_files.push_back(name);
      for (const auto& [tensor, value] : shards[i]) weight_map[tensor] = name;
    }
    if (shards.size() > 1) {
      write_json_file(dir / "model.safetensors.index.json",
                      {{"metadata", {{"total_size", report.weight_bytes}}}, {"weight_map", weight_map}});
    }
    for (const auto& file : options.copy_files) copy_model_file(file, dir / fs::path(file).filename());
    for (const auto& [name, json] : options.generated_files) write_json_file(dir / name, json);
    if (!options.generation_config.is_null())
      write_json_file(dir / "generation_config.json", options.generation_config);
  });
  return report;
}

}  // namespace sao::model
