// Where a model runs: parsing "cpu" / "cuda" / "cuda:N", checking that the
// device exists in this process, and bf16 autocast on CUDA.
//
// Why this file is the one place that names LibTorch's version: the Debian
// LibTorch is 1.13 (CPU), the GPU builds use a LibTorch 2.x with CUDA, and
// the few calls whose signatures differ (autocast, device counts) go through
// the functions here, so no other file needs a version check.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>

namespace sao::model {

// "cpu", "cuda" (device 0) or "cuda:N". Throws sao::Error naming `where`
// and the text otherwise. Does not check that the device exists.
torch::Device parse_device(const std::string& text, const std::string& where);

// The canonical spelling of a device ("cpu", "cuda:0").
std::string device_name(const torch::Device& device);

// Throws sao::Error naming `where` when `device` cannot be used by this
// process: a CUDA device with a LibTorch built without CUDA, no driver or
// GPU, or an index past the devices present.
void require_device(const torch::Device& device, const std::string& where);

// CUDA devices this LibTorch can use (0 with a CPU-only LibTorch).
int64_t cuda_device_count();

// Waits for the device's queued work; a no-op on the CPU. Timings of CUDA
// work are only meaningful after it.
void synchronize(const torch::Device& device);

// bf16 autocast for the scope, on CUDA only (a CPU device or enabled=false
// leaves everything as it is). Matrix products run in bf16; log_softmax,
// the log-probs and every loss stay fp32 because callers cast logits to
// fp32 first and autocast keeps reductions in fp32.
class AutocastGuard {
 public:
  AutocastGuard(const torch::Device& device, bool enabled);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool active_ = false;
  bool previous_ = false;
};

}  // namespace sao::model
