// Shared by the checkpoint tests: a small model shape, a fresh per-process
// temporary directory, and a byte-level run's checkpoint with its export.
#pragma once

#include "model/checkpoint.hpp"
#include "model/model_config.hpp"
#include "test_process_helpers.hpp"

#include <unistd.h>

#include <filesystem>
#include <string>

namespace sao_test {

inline sao::model::ModelConfig small_config() {
  sao::model::ModelConfig config;
  config.hidden_size = 32;
  config.intermediate_size = 64;
  config.num_hidden_layers = 2;
  config.num_attention_heads = 4;
  config.num_key_value_heads = 2;
  return config;
}

// TEMP/sao_test_<prefix><name>_<pid>, removed if it exists.
inline std::filesystem::path fresh_dir(const std::string& prefix, const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("sao_test_" + prefix + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}

// The default run's (byte-level) model, initialised with `seed`, saved as a
// policy checkpoint at `checkpoint` and exported by `sao export` to
// `exported`; returns export's output.
inline std::string save_and_export_byte_run(const std::filesystem::path& checkpoint,
                                            const std::filesystem::path& exported, uint64_t seed) {
  sao::model::CausalLM policy(sao::model::ModelConfig{});
  sao::model::init_weights(*policy, seed);
  sao::model::save_policy_checkpoint(checkpoint.string(), policy, {{"step", 0}});
  const auto result = run_command(std::string(SAO_BINARY) + " export " + quoted(checkpoint.string()) + " --out " +
                                  quoted(exported.string()));
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  return result.output;
}

}  // namespace sao_test
