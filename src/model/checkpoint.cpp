// Checkpoint directories; see checkpoint.hpp. A checkpoint may come from
// anywhere (downloaded, hand-edited, half-written), so loading checks every
// file before acting on it: each must be a regular file of sane size, the
// JSON is depth-limited, config.json must be within the model size bounds,
// and the weights' header must list exactly the tensors config.json implies
// before a model of that size is built.
#include "model/checkpoint.hpp"

#include "model/lora.hpp"

#include "base/error.hpp"
#include "base/failpoint.hpp"
#include "base/hash.hpp"
#include "base/json_parse.hpp"
#include "model/regular_file.hpp"
#include "model/safetensors.hpp"
#include "model/weight_files.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

namespace sao::model {

namespace fs = std::filesystem;

namespace {

// config.json is a few kilobytes and sao.json holds one run config; a JSON
// file this big is not a checkpoint file, and reading it is not attempted.
constexpr std::uint64_t kMaxJsonFileBytes = 16ull * 1024 * 1024;

void write_json(const fs::path& path, const nlohmann::json& json) {
  std::ofstream out(path);
  out << base::dump_json(json, 2) << "\n";
  if (!out) throw Error("cannot write " + path.string());
}

nlohmann::json read_json(const fs::path& path) {
  return base::parse_json_limited(read_regular_file(path.string(), kMaxJsonFileBytes), "checkpoint " + path.string());
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// The indices N of the "model.layers.N." tensors in the file.
std::set<int64_t> layer_indices(const SafetensorsHeader& header) {
  static const std::string prefix = "model.layers.";
  std::set<int64_t> indices;
  for (const auto& [name, info] : header.tensors) {
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const auto dot = name.find('.', prefix.size());
    const auto digits = name.substr(prefix.size(), dot == std::string::npos ? std::string::npos : dot - prefix.size());
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    indices.insert(std::stoll(digits));
  }
  return indices;
}

// Compares config.json with what the weights imply, key by key, so that a
// disagreement names the key and both values rather than only a tensor; a
// full name-and-shape comparison then catches anything the keys do not.
// The weights fix head_dim * num_key_value_heads (the k_proj rows) but not
// num_attention_heads on its own, so heads are checked through that product.
void check_weights_match_config(const std::string& dir, const ModelConfig& config, const SafetensorsHeader& header) {
  const std::string where = "checkpoint " + dir + ": ";
  const auto find = [&](const std::string& name) -> const TensorInfo* {
    const auto it = header.tensors.find(name);
    return it == header.tensors.end() ? nullptr : &it->second;
  };
  const auto matrix = [&](const std::string& name) -> const TensorInfo* {
    const auto* info = find(name);
    return info != nullptr && info->shape.size() == 2 ? info : nullptr;
  };
  const auto evidence = [](const std::string& name, const TensorInfo& info) {
    return "tensor '" + name + "' has shape " + shape_text(info.shape);
  };
  const auto mismatch = [&](const char* key, int64_t in_config, int64_t in_weights, const std::string& why) {
    throw Error(where + "config.json " + key + " is " + std::to_string(in_config) + " but model.safetensors has " +
                std::to_string(in_weights) + " (" + why + ")");
  };

  if (const auto* embed = matrix("model.embed_tokens.weight")) {
    if (embed->shape[0] != config.vocab_size)
      mismatch("vocab_size", config.vocab_size, embed->shape[0], evidence("model.embed_tokens.weight", *embed));
    if (embed->shape[1] != config.hidden_size)
      mismatch("hidden_size", config.hidden_size, embed->shape[1], evidence("model.embed_tokens.weight", *embed));
  }
  const auto layers = layer_indices(header);
  if (static_cast<int64_t>(layers.size()) != config.num_hidden_layers)
    mismatch("num_hidden_layers", config.num_hidden_layers, static_cast<int64_t>(layers.size()),
             layers.empty()
                 ? std::string("no model.layers.N tensors")
                 : "tensors of layers " + std::to_string(*layers.begin()) + " to " + std::to_string(*layers.rbegin()));
  const std::string gate_name = "model.layers.0.mlp.gate_proj.weight";
  if (const auto* gate = matrix(gate_name); gate != nullptr && gate->shape[0] != config.intermediate_size)
    mismatch("intermediate_size", config.intermediate_size, gate->shape[0], evidence(gate_name, *gate));
  const std::string key_name = "model.layers.0.self_attn.k_proj.weight";
  if (const auto* key = matrix(key_name)) {
    const int64_t head_dim = config.head_dim();
    if (key->shape[0] != config.num_key_value_heads * head_dim) {
      const bool whole = key->shape[0] % head_dim == 0;
      throw Error(where + "config.json num_key_value_heads is " + std::to_string(config.num_key_value_heads) +
                  " but model.safetensors has " +
                  (whole ? std::to_string(key->shape[0] / head_dim) : std::string("no whole number of")) + " (" +
                  evidence(key_name, *key) + ", and head_dim is hidden_size " + std::to_string(config.hidden_size) +
                  " / num_attention_heads " + std::to_string(config.num_attention_heads) + " = " +
                  std::to_string(head_dim) + ")");
    }
  }
  const auto* lm_head = find("lm_head.weight");
  if (lm_head == nullptr && !config.tie_word_embeddings)
    throw Error(where +
                "config.json tie_word_embeddings is false but model.safetensors has no separate 'lm_head.weight'");
  // Tied, with the head saved anyway (some exporters write both): transformers
  // ties the head to the embedding after loading, so the copy is ignored,
  // once its shape shows it is the head this config implies.
  if (lm_head != nullptr && config.tie_word_embeddings &&
      lm_head->shape != std::vector<int64_t>{config.vocab_size, config.hidden_size})
    throw Error(where + "config.json tie_word_embeddings is true and the ignored 'lm_head.weight' must then be [" +
                std::to_string(config.vocab_size) + ", " + std::to_string(config.hidden_size) + "], but " +
                evidence("lm_head.weight", *lm_head));
  const bool has_bias = find("model.layers.0.self_attn.q_proj.bias") != nullptr;
  if (has_bias != config.attention_bias)
    throw Error(where + "config.json attention_bias is " + (config.attention_bias ? "true" : "false") +
                " but model.safetensors " + (has_bias ? "has" : "has no") + " 'model.layers.0.self_attn.q_proj.bias'");

  std::set<std::string> expected_names;
  for (const auto& [name, shape] : policy_tensor_shapes(config)) {
    expected_names.insert(name);
    const auto* info = find(name);
    if (info == nullptr)
      throw Error(where + "model.safetensors lacks tensor '" + name + "' that config.json implies (shape " +
                  shape_text(shape) + ")");
    if (info->shape != shape)
      throw Error(where + "tensor '" + name + "': config.json implies shape " + shape_text(shape) +
                  " but model.safetensors has " + shape_text(info->shape));
  }
  for (const auto& [name, info] : header.tensors)
    if (expected_names.count(name) == 0 && !(name == "lm_head.weight" && config.tie_word_embeddings))
      throw Error(where + "model.safetensors has tensor '" + name + "' that config.json does not imply");
}

}  // namespace

namespace {

constexpr const char* kManifestName = "MANIFEST.json";
constexpr const char* kManifestFormat = "sao-checkpoint-1";
constexpr std::size_t kHashChunk = 1 << 20;

// FNV-1a 64 over a file's bytes, as hex. Not a defence against an attacker
// (who can rewrite the manifest too) but against a torn or bit-flipped file.
std::string file_checksum(const fs::path& path, std::uint64_t* bytes_out) {
  RegularFile file(path.string());
  std::uint64_t hash = base::kFnv1a64Start;
  std::vector<char> chunk(kHashChunk);
  for (std::uint64_t offset = 0; offset < file.size();) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), file.size() - offset));
    file.read_at(offset, chunk.data(), n);
    hash = base::fnv1a64(std::string_view(chunk.data(), n), hash);
    offset += n;
  }
  *bytes_out = file.size();
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

// Every regular file under `root` except the manifest, as paths relative to it.
std::vector<std::string> files_under(const fs::path& root) {
  std::vector<std::string> names;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (!entry.is_regular_file()) continue;
    auto relative = fs::relative(entry.path(), root).generic_string();
    if (relative != kManifestName) names.push_back(std::move(relative));
  }
  std::sort(names.begin(), names.end());
  return names;
}

void write_manifest(const fs::path& root) {
  nlohmann::json files = nlohmann::json::object();
  for (const auto& name : files_under(root)) {
    std::uint64_t bytes = 0;
    const auto checksum = file_checksum(root / name, &bytes);
    files[name] = {{"bytes", bytes}, {"fnv1a64", checksum}};
  }
  write_json(root / kManifestName, {{"format", kManifestFormat}, {"files", files}});
}

// The newest `<dir>.<tag>-<stamp>` sibling (stamps are steady-clock counts
// of the writer, so a larger one is later), or "" when there is none.
fs::path newest_sibling(const fs::path& dir, const std::string& tag, std::vector<fs::path>* all = nullptr) {
  const auto parent = dir.has_parent_path() ? dir.parent_path() : fs::path(".");
  const std::string prefix = dir.filename().string() + "." + tag + "-";
  fs::path newest;
  long long newest_stamp = -1;
  std::error_code ec;
  if (!fs::is_directory(parent, ec)) return newest;
  for (const auto& entry : fs::directory_iterator(parent)) {
    const auto name = entry.path().filename().string();
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    if (all != nullptr) all->push_back(entry.path());
    const auto digits = name.substr(prefix.size());
    if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const long long stamp = std::stoll(digits);
    if (stamp > newest_stamp) {
      newest_stamp = stamp;
      newest = entry.path();
    }
  }
  return newest;
}

}  // namespace

std::string previous_directory(const std::string& dir) {
  return dir + ".previous";
}

std::string recover_directory_swap(const std::string& dir) {
  const fs::path final_path(dir);
  std::string report;
  // A staging copy that never finished is garbage whatever else happened.
  std::vector<fs::path> partials;
  newest_sibling(final_path, "partial", &partials);
  for (const auto& partial : partials) fs::remove_all(partial);
  std::vector<fs::path> completes;
  const auto complete = newest_sibling(final_path, "complete", &completes);
  if (!complete.empty()) {
    // A finished copy that was not yet swapped in is the newest checkpoint.
    if (fs::exists(final_path)) {
      fs::remove_all(previous_directory(dir));
      fs::rename(final_path, previous_directory(dir));
    }
    fs::rename(complete, final_path);
    report =
        "finished the interrupted swap of " + dir + " (the new copy " + complete.filename().string() + " was complete)";
  } else if (!fs::exists(final_path) && fs::exists(previous_directory(dir))) {
    // Interrupted between "final -> previous" and "complete -> final" with
    // the complete copy gone: the previous one is the last good state.
    fs::rename(previous_directory(dir), final_path);
    report = "restored " + dir + " from " + fs::path(previous_directory(dir)).filename().string();
  }
  for (const auto& stale : completes) {
    if (stale != complete) fs::remove_all(stale);
  }
  return report;
}

void write_directory_atomically(const std::string& dir, const std::function<void(const std::string&)>& write_files) {
  const fs::path final_path(dir);
  if (final_path.has_parent_path()) fs::create_directories(final_path.parent_path());
  recover_directory_swap(dir);
  const auto stamp = std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  const fs::path staging = final_path.string() + ".partial-" + stamp;
  const fs::path complete = final_path.string() + ".complete-" + stamp;
  fs::create_directories(staging);
  try {
    write_files(staging.string());
    write_manifest(staging);
  } catch (...) {
    fs::remove_all(staging);
    throw;
  }
  // Each rename is atomic, and at every point between them one complete
  // copy exists under a name recover_directory_swap() knows:
  //   staging -> complete;  final -> previous;  complete -> final.
  const std::string name = final_path.filename().string();
  base::failpoint("swap.staged:" + name);
  fs::rename(staging, complete);
  base::failpoint("swap.complete:" + name);
  if (fs::exists(final_path)) {
    fs::remove_all(previous_directory(dir));
    fs::rename(final_path, previous_directory(dir));
    base::failpoint("swap.previous:" + name);
  }
  fs::rename(complete, final_path);
}

namespace {

nlohmann::json read_manifest_files(const fs::path& manifest_path) {
  const auto manifest = read_json(manifest_path);
  const std::string where = "checkpoint " + manifest_path.string() + ": ";
  if (!manifest.is_object() || manifest.value("format", std::string()) != kManifestFormat)
    throw Error(where + "format must be \"" + std::string(kManifestFormat) + "\"");
  if (!manifest.contains("files") || !manifest["files"].is_object()) throw Error(where + "\"files\" must be an object");
  for (const auto& [name, entry] : manifest["files"].items()) {
    if (!entry.is_object() || !entry.contains("bytes") || !entry["bytes"].is_number_unsigned() ||
        !entry.contains("fnv1a64") || !entry["fnv1a64"].is_string())
      throw Error(where + "entry '" + name + "' must be {\"bytes\": N, \"fnv1a64\": HEX}");
    if (name.find("..") != std::string::npos || (!name.empty() && name[0] == '/'))
      throw Error(where + "entry '" + name + "' points outside the checkpoint");
  }
  return manifest["files"];
}

bool has_manifest(const fs::path& dir) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(dir / kManifestName, ec));
}

// Checks one manifest entry against the file; throws naming the file.
void check_manifest_entry(const fs::path& root, const std::string& name, const nlohmann::json& entry) {
  const std::string where = "checkpoint " + root.string() + ": ";
  std::error_code ec;
  const fs::path path = root / name;
  if (!fs::exists(fs::symlink_status(path, ec))) throw Error(where + name + " is missing");
  std::uint64_t bytes = 0;
  const auto checksum = file_checksum(path, &bytes);
  if (bytes != entry["bytes"].get<std::uint64_t>())
    throw Error(where + name + " has " + std::to_string(bytes) + " bytes, the manifest says " +
                std::to_string(entry["bytes"].get<std::uint64_t>()));
  if (checksum != entry["fnv1a64"].get<std::string>())
    throw Error(where + name + " does not match its checksum (file " + checksum + ", manifest " +
                entry["fnv1a64"].get<std::string>() + "): corrupted");
}

}  // namespace

void verify_directory(const std::string& dir) {
  const fs::path root(dir);
  if (!has_manifest(root)) return;  // written before manifests existed
  const auto files = read_manifest_files(root / kManifestName);
  for (const auto& [name, entry] : files.items()) check_manifest_entry(root, name, entry);
  for (const auto& name : files_under(root)) {
    if (!files.contains(name)) throw Error("checkpoint " + dir + ": " + name + " is not in the manifest");
  }
}

std::size_t verify_checkpoint_files(const std::string& dir, const std::string& only) {
  const fs::path root(dir);
  if (!has_manifest(root)) return 0;
  const auto files = read_manifest_files(root / kManifestName);
  std::size_t checked = 0;
  for (const auto& [name, entry] : files.items()) {
    if (!only.empty() && name != only) continue;
    check_manifest_entry(root, name, entry);
    ++checked;
  }
  return checked;
}

std::string resolve_checkpoint(const std::string& dir, std::string* notice) {
  const auto recovered = recover_directory_swap(dir);
  std::string text = recovered;
  std::string first_error;
  try {
    if (!fs::is_directory(dir)) throw Error("checkpoint " + dir + ": no such directory");
    verify_directory(dir);
    if (notice != nullptr) *notice = text;
    return dir;
  } catch (const Error& error) {
    first_error = error.what();
  }
  const auto previous = previous_directory(dir);
  if (fs::is_directory(previous)) {
    try {
      verify_directory(previous);
      if (notice != nullptr)
        *notice = (text.empty() ? "" : text + "; ") + first_error + "; using the previous checkpoint " + previous;
      return previous;
    } catch (const Error& error) {
      throw Error(first_error + "; and the previous checkpoint is no better: " + error.what());
    }
  }
  throw Error(first_error);
}

void save_policy_checkpoint(const std::string& dir, const CausalLM& policy, const nlohmann::json& info) {
  write_directory_atomically(dir, [&](const std::string& staging) {
    write_json(fs::path(staging) / "config.json", model_config_to_json(policy->config()));
    // A LoRA policy: the frozen base in model.safetensors (a plain Hugging
    // Face directory) and the adapters beside it in PEFT's layout.
    const bool lora = policy->config().lora.enabled();
    save_safetensors((fs::path(staging) / "model.safetensors").string(),
                     lora ? base_tensors(*policy) : named_tensors_of(*policy), {{"format", "pt"}});
    if (lora) {
      const auto base_model = info.value("tokenizer", nlohmann::json("byte"));
      write_peft_adapter(staging, policy,
                         base_model.is_string() && base_model != "byte" ? base_model.get<std::string>() : "");
    }
    nlohmann::json sao_info = info;
    sao_info["tokenizer"] = info.value("tokenizer", "byte");
    write_json(fs::path(staging) / "sao.json", sao_info);
  });
}

namespace {
ModelConfig read_checkpoint_config(const std::string& dir) {
  const fs::path path = fs::path(dir) / "config.json";
  const auto json = read_json(path);
  // Real HF configs carry keys this runtime does not use; they are ignored,
  // but one that would make sao compute another model than the file
  // describes (a sliding window, another rope scaling) stops the load.
  const auto problems = unsupported_hf_config_keys(json);
  if (!problems.empty()) {
    std::string text;
    for (const auto& problem : problems) text += (text.empty() ? "" : "; ") + problem;
    throw Error("checkpoint " + path.string() + ": " + text);
  }
  return model_config_from_json(json, "checkpoint " + path.string(), ConfigKind::kHuggingFace);
}
}  // namespace

ModelConfig load_checkpoint_config(const std::string& dir) {
  verify_checkpoint_files(dir, "config.json");
  return read_checkpoint_config(dir);
}

CausalLM load_policy_checkpoint(const std::string& dir, nlohmann::json* info) {
  if (!fs::is_directory(dir)) throw Error("checkpoint " + dir + ": no such directory");
  // Every file the manifest lists, before anything is read for use: a
  // flipped bit stops the load here, naming the file.
  verify_checkpoint_files(dir);
  const auto config = read_checkpoint_config(dir);
  const auto weights = read_weight_files(dir);
  check_weights_match_config(dir, config, weights.header);
  nlohmann::json stored_info = nlohmann::json::object();
  const fs::path sao_path = fs::path(dir) / "sao.json";
  std::error_code ec;
  if (info != nullptr && fs::exists(fs::symlink_status(sao_path, ec))) {
    stored_info = read_json(sao_path);
    if (!stored_info.is_object())
      throw Error("checkpoint " + sao_path.string() + ": must be a JSON object, got " + stored_info.type_name());
  }
  // Only now is the model built: its size is what config.json says, and the
  // weights file has been shown to hold exactly that many tensors of those shapes.
  CausalLM policy(config);
  load_weight_files(*policy, weights,
                    config.tie_word_embeddings ? std::set<std::string>{"lm_head.weight"} : std::set<std::string>{});
  if (has_peft_adapter(dir)) load_peft_adapter(policy, dir);
  if (info != nullptr) *info = std::move(stored_info);
  return policy;
}

std::string sft_checkpoint_dir(const std::string& run_dir) {
  return (fs::path(run_dir) / "sft").string();
}

std::string rl_checkpoint_dir(const std::string& run_dir) {
  return (fs::path(run_dir) / "checkpoint").string();
}

std::string checkpoint_policy_dir(const std::string& checkpoint_dir) {
  return (fs::path(checkpoint_dir) / "policy").string();
}

std::string checkpoint_learner_dir(const std::string& checkpoint_dir) {
  return (fs::path(checkpoint_dir) / "learner").string();
}

}  // namespace sao::model
