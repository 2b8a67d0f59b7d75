// Checkpoint directories; see checkpoint.hpp.
#include "model/checkpoint.hpp"

#include "model/safetensors.hpp"
#include "base/error.hpp"

#include <chrono>
#include <filesystem>
#include <fstream>

namespace sao::model {

namespace fs = std::filesystem;

namespace {
void write_json(const fs::path& path, const nlohmann::json& json) {
  std::ofstream out(path);
  out << json.dump(2) << "\n";
  if (!out) throw Error("cannot write " + path.string());
}

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw Error("checkpoint " + path.string() + ": file is missing or unreadable");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& error) {
    throw Error("checkpoint " + path.string() + ": not valid JSON: " + error.what());
  }
}
}  // namespace

void write_directory_atomically(const std::string& dir, const std::function<void(const std::string&)>& write_files) {
  const fs::path final_path(dir);
  const auto stamp = std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  const fs::path staging = final_path.string() + ".partial-" + stamp;
  const fs::path previous = final_path.string() + ".previous-" + stamp;
  if (final_path.has_parent_path()) fs::create_directories(final_path.parent_path());
  fs::create_directories(staging);
  try {
    write_files(staging.string());
  } catch (...) {
    fs::remove_all(staging);
    throw;
  }
  const bool had_previous = fs::exists(final_path);
  if (had_previous) fs::rename(final_path, previous);
  fs::rename(staging, final_path);
  if (had_previous) fs::remove_all(previous);
}

void save_policy_checkpoint(const std::string& dir, const CausalLM& policy, const nlohmann::json& info) {
  write_directory_atomically(dir, [&](const std::string& staging) {
    write_json(fs::path(staging) / "config.json", model_config_to_json(policy->config()));
    save_safetensors((fs::path(staging) / "model.safetensors").string(), named_tensors_of(*policy), {{"format", "pt"}});
    nlohmann::json sao_info = info;
    sao_info["tokenizer"] = info.value("tokenizer", "byte");
    write_json(fs::path(staging) / "sao.json", sao_info);
  });
}

ModelConfig load_checkpoint_config(const std::string& dir) {
  const fs::path path = fs::path(dir) / "config.json";
  // Real HF configs carry keys this runtime does not use; they are ignored here.
  return model_config_from_json(read_json(path), "checkpoint " + path.string(), /*allow_unknown_keys=*/true);
}

CausalLM load_policy_checkpoint(const std::string& dir, nlohmann::json* info) {
  if (!fs::is_directory(dir)) throw Error("checkpoint " + dir + ": no such directory");
  CausalLM policy(load_checkpoint_config(dir));
  load_into_module(*policy, (fs::path(dir) / "model.safetensors").string(), /*strict=*/true);
  if (info != nullptr) {
    const fs::path sao_path = fs::path(dir) / "sao.json";
    *info = fs::exists(sao_path) ? read_json(sao_path) : nlohmann::json::object();
  }
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
