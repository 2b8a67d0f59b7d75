// The entry point of the test_gpu_device_* executables: without a CUDA
// device they print why and exit 77, which CTest reports as skipped
// (SKIP_RETURN_CODE in tests/CMakeLists.txt), instead of passing silently.
#pragma once

#define DOCTEST_CONFIG_IMPLEMENT
#include "config/run_config.hpp"
#include "model/device.hpp"

#include <doctest/doctest.h>

#include <cstdio>

namespace sao::test {
// The shape of the default model (config/default.json, embedded).
inline model::ModelConfig default_model_config() {
  return config::parse_run_config(config::default_config_document(), "embedded").model;
}
}  // namespace sao::test

int main(int argc, char** argv) {
  if (sao::model::cuda_device_count() == 0) {
    std::printf("skipped: no CUDA device (this LibTorch has no CUDA, or no GPU is present)\n");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
