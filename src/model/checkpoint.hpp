// Checkpoint directories in the Hugging Face layout: `config.json`,
// `model.safetensors` and, for the value model, `value_model.safetensors`,
// plus `sao.json` with what the runtime needs to resume (tokenizer kind,
// step, policy version). A directory is written next to its final place and
// swapped in by rename, so a crash mid-save keeps the last good checkpoint.
#pragma once

#include "model/transformer.hpp"

#include <nlohmann/json.hpp>

#include <functional>
#include <string>

namespace sao::model {

// Writes `write_files(staging_dir)` into a fresh staging directory, then
// replaces `dir` with it. On any failure `dir` is left as it was.
void write_directory_atomically(const std::string& dir, const std::function<void(const std::string&)>& write_files);

void save_policy_checkpoint(const std::string& dir, const CausalLM& policy, const nlohmann::json& info);
// Throws sao::Error naming the file and tensor for any missing or bad content.
CausalLM load_policy_checkpoint(const std::string& dir, nlohmann::json* info = nullptr);
ModelConfig load_checkpoint_config(const std::string& dir);

}  // namespace sao::model
