// A run directory with a warm start of a tiny model, and `sao train` on it
// for a few steps: what the end-to-end failure tests drive. Reading back
// metrics.jsonl by step number is here too.
#pragma once

#include "model/checkpoint.hpp"
#include "model/transformer.hpp"
#include "test_process_helpers.hpp"

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace sao_test {

namespace fs = std::filesystem;

inline sao::model::ModelConfig tiny_model() {
  sao::model::ModelConfig config;
  config.hidden_size = 32;
  config.intermediate_size = 64;
  config.num_hidden_layers = 1;
  config.num_attention_heads = 2;
  config.num_key_value_heads = 1;
  config.max_position_embeddings = 32;
  return config;
}

// A directory per test case with a warm start of the tiny shape.
struct RunFixture {
  fs::path base;
  fs::path run_dir;
  fs::path warm_start;

  explicit RunFixture(const std::string& name) {
    base = fs::temp_directory_path() / ("sao_test_run_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(base);
    run_dir = base / "run";
    warm_start = base / "warm";
    sao::model::CausalLM policy(tiny_model());
    sao::model::init_weights(*policy, 7);
    sao::model::save_policy_checkpoint(warm_start.string(), policy, {{"tokenizer", "byte"}, {"stage", "sft"}});
  }
  ~RunFixture() { fs::remove_all(base); }

  // `sao train` on the tiny model with `extra` settings appended.
  CommandResult train(const std::string& extra, const std::string& environment = "") const {
    const std::string command =
        environment + std::string(SAO_BINARY) + " train --run-dir " + quoted(run_dir.string()) +
        " --set train.init_checkpoint=" + quoted("\"" + warm_start.string() + "\"") +
        " --set model.hidden_size=32 --set model.intermediate_size=64 --set model.num_hidden_layers=1"
        " --set model.num_attention_heads=2 --set model.num_key_value_heads=1"
        " --set model.max_position_embeddings=32 --set task.min_digits=1 --set task.max_digits=1"
        " --set task.test_size=8 --set eval.max_new_tokens=4 --set rollout.max_new_tokens=4"
        " --set rollout.slots=4 --set replay.min_batch=4 --set replay.max_batch=4"
        " --set console.enabled=false " +
        extra;
    return run_command(command);
  }
};

inline std::vector<nlohmann::json> lines_of(const fs::path& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

// Learner step numbers in metrics.jsonl, in file order.
inline std::vector<int64_t> step_numbers(const fs::path& run_dir) {
  std::vector<int64_t> steps;
  for (const auto& line : lines_of(run_dir / "metrics.jsonl")) {
    if (!line.contains("eval") && !line.contains("event")) steps.push_back(line["step"].get<int64_t>());
  }
  return steps;
}

inline std::vector<int64_t> one_to(int64_t n) {
  std::vector<int64_t> steps;
  for (int64_t i = 1; i <= n; ++i) steps.push_back(i);
  return steps;
}

}  // namespace sao_test
