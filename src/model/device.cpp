// Device names, checks and autocast; see device.hpp.
#include "model/device.hpp"

#include "base/error.hpp"

#include <ATen/autocast_mode.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <cctype>

namespace sao::model {

torch::Device parse_device(const std::string& text, const std::string& where) {
  if (text == "cpu") return torch::Device(torch::kCPU);
  if (text == "cuda") return torch::Device(torch::kCUDA, 0);
  const std::string prefix = "cuda:";
  if (text.rfind(prefix, 0) == 0 && text.size() > prefix.size() && text.size() <= prefix.size() + 3) {
    bool digits = true;
    for (size_t i = prefix.size(); i < text.size(); ++i)
      digits = digits && std::isdigit(static_cast<unsigned char>(text[i]));
    if (digits) {
      return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(std::stoi(text.substr(prefix.size()))));
    }
  }
  throw Error(where + ": expected \"cpu\", \"cuda\" or \"cuda:N\", got \"" + text + "\"");
}

std::string device_name(const torch::Device& device) {
  if (device.is_cpu()) return "cpu";
  return std::string(device.is_cuda() ? "cuda:" : "device:") + std::to_string(device.has_index() ? device.index() : 0);
}

int64_t cuda_device_count() {
  return torch::cuda::is_available() ? static_cast<int64_t>(torch::cuda::device_count()) : 0;
}

void require_device(const torch::Device& device, const std::string& where) {
  if (device.is_cpu()) return;
  if (!device.is_cuda()) throw Error(where + ": only cpu and cuda devices are supported");
  const auto count = cuda_device_count();
  if (count == 0) {
    throw Error(where + ": " + device_name(device) +
                " requested, but this sao has no CUDA device (its LibTorch is CPU-only, or no GPU/driver is present; "
                "`sao doctor` says which)");
  }
  const int64_t index = device.has_index() ? device.index() : 0;
  if (index >= count) {
    throw Error(where + ": " + device_name(device) + " requested, but only " + std::to_string(count) +
                " CUDA device(s) are present");
  }
}

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.has_index() ? device.index() : -1);
}

// LibTorch 2.x takes the device type in every autocast call; 1.13 had CUDA-only calls.
namespace {
bool autocast_enabled() {
#if TORCH_VERSION_MAJOR >= 2
  return at::autocast::is_autocast_enabled(at::kCUDA);
#else
  return at::autocast::is_enabled();
#endif
}
void set_autocast(bool enabled) {
#if TORCH_VERSION_MAJOR >= 2
  at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
  at::autocast::set_autocast_enabled(at::kCUDA, enabled);
#else
  at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
  at::autocast::set_enabled(enabled);
#endif
}
}  // namespace

AutocastGuard::AutocastGuard(const torch::Device& device, bool enabled) {
  if (!enabled || !device.is_cuda()) return;
  previous_ = autocast_enabled();
  set_autocast(true);
  active_ = true;
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  set_autocast(previous_);
  // The casted weight copies are cached per autocast region; the weights
  // change every learner step, so the cache must not outlive the region.
  if (!previous_) at::autocast::clear_cache();
}

}  // namespace sao::model
