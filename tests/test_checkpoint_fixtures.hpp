// Shared by the checkpoint tests: a small model shape and a fresh
// per-process temporary directory.
#pragma once

#include "model/model_config.hpp"

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

}  // namespace sao_test
