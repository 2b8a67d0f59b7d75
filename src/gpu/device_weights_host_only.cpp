// device_weights.hpp's CUDA calls in a sao built without the CUDA transports
// (-DSAO_WITH_CUDA=OFF, or no CUDA runtime/NCCL found): CUDA IPC is never
// chosen (no GPU UUID is known), and asking for it is an error that says why.
#include "gpu/device_weights.hpp"

#include "base/error.hpp"

namespace sao::gpu {

namespace {
const char* kNotBuilt =
    "CUDA IPC: this sao was built without the CUDA transports (configure with -DSAO_WITH_CUDA=ON where the CUDA "
    "runtime and NCCL are installed)";
}

bool cuda_transports_built() {
  return false;
}

std::string gpu_uuid_of(const torch::Device&) {
  return "";
}

model::DevicePackedTensors pack_for_rollouts(const torch::nn::Module& module, const torch::Device& device) {
  return model::pack_module_on_device(module, device);
}

std::string export_ipc(const model::DevicePackedTensors&) {
  throw Error(kNotBuilt);
}

void load_ipc_into_module(torch::nn::Module&, const std::string&, const std::vector<model::PackedTensor>&,
                          const torch::Device&, const std::string& where) {
  throw Error(where + ": " + kNotBuilt);
}

}  // namespace sao::gpu
