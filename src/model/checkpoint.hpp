// Checkpoint directories in the Hugging Face layout: `config.json`,
// `model.safetensors` and, for the value model, `value_model.safetensors`,
// plus `sao.json` with what the runtime needs to resume (tokenizer kind,
// step, policy version). A LoRA policy's directory holds its frozen base
// in model.safetensors and its adapters in PEFT's layout beside it
// (adapter_config.json, adapter_model.safetensors; model/lora.hpp). A directory is written next to its final place and
// swapped in by rename, so a crash mid-save keeps the last good checkpoint.
#pragma once

#include "model/transformer.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <functional>
#include <string>

namespace sao::model {

// Writes `write_files(staging_dir)` into a fresh staging directory, adds
// MANIFEST.json (format "sao-checkpoint-1", each file's size and FNV-1a 64
// checksum), then swaps it in: the copy it replaces is kept as
// `dir.previous`. On any failure `dir` is left as it was; a process killed
// at any point leaves one complete copy that recover_directory_swap() finds.
void write_directory_atomically(const std::string& dir, const std::function<void(const std::string&)>& write_files);

// `dir` + ".previous": the checkpoint before the latest one.
std::string previous_directory(const std::string& dir);

// Repairs what a process killed mid-swap left: removes unfinished staging
// copies, swaps in a finished one that was not yet renamed, or restores
// `dir.previous` when `dir` is missing. Returns what it did ("" if nothing).
std::string recover_directory_swap(const std::string& dir);

// Checks every file against MANIFEST.json (size, checksum, no file missing
// or extra). Throws sao::Error naming the file. A directory without a
// manifest (written by an older sao) passes.
void verify_directory(const std::string& dir);

// The check every reader of a checkpoint makes before using a byte of it:
// each file that `dir`'s MANIFEST.json lists must be there with its size
// and checksum ("checkpoint DIR: NAME does not match its checksum (file X,
// manifest Y): corrupted"). (An RL checkpoint's policy/ folder has a
// manifest of its own.) Files the manifest does not list (a README added
// to an export) are not covered, and a directory without a manifest (a
// Hub download, or sao before manifests) passes. `only` "" checks every
// listed file, else just that one. Returns how many files were checked.
std::size_t verify_checkpoint_files(const std::string& dir, const std::string& only = "");

// The checkpoint to resume from: `dir` after recover_directory_swap(), if it
// verifies; otherwise `dir.previous` if that verifies. `notice` receives
// what was repaired or why the previous copy is used ("" if neither).
// Throws sao::Error with every reason when no copy is usable.
std::string resolve_checkpoint(const std::string& dir, std::string* notice = nullptr);

void save_policy_checkpoint(const std::string& dir, const CausalLM& policy, const nlohmann::json& info);
// The one loader of a policy: `sao eval`, `sao export`, `--resume`,
// `train.init_checkpoint`, the SFT warm start, `--model DIR` and the benches
// all load through it. It first runs verify_checkpoint_files(dir).
// Throws sao::Error naming the file and tensor for any missing or bad content.
// Nothing is allocated for the model until config.json (size-bounded, see
// ModelConfig::validate) and the header of model.safetensors agree on every
// tensor name and shape; a disagreement names the config key and both values.
// Files that are not regular files (a FIFO, a device) are refused by name.
// `info` receives sao.json (an object; empty when the file is absent). Loading
// never runs anything a checkpoint names: sao.json is data for the caller.
CausalLM load_policy_checkpoint(const std::string& dir, nlohmann::json* info = nullptr);
// config.json, checked against the manifest, parsed and bounds-checked;
// nothing else is read.
ModelConfig load_checkpoint_config(const std::string& dir);

// Where a run keeps its checkpoints. The learner writes them and the warm
// start and `--resume` read them, so the names are written down once, here:
//   RUN_DIR/sft                 the SFT warm start (a policy checkpoint)
//   RUN_DIR/checkpoint          the latest RL checkpoint, swapped in whole
//   RUN_DIR/checkpoint/policy   ... its policy (a policy checkpoint)
//   RUN_DIR/checkpoint/learner  ... the learner's state (algo::Learner::save)
// checkpoint_policy_dir and checkpoint_learner_dir also name the places inside
// a staging directory that write_directory_atomically will swap in.
std::string sft_checkpoint_dir(const std::string& run_dir);
std::string rl_checkpoint_dir(const std::string& run_dir);
std::string checkpoint_policy_dir(const std::string& checkpoint_dir);
std::string checkpoint_learner_dir(const std::string& checkpoint_dir);

}  // namespace sao::model
