// device_weights.hpp's CUDA calls, with the CUDA transports built (sao_gpu).
#include "gpu/cuda_ipc.hpp"
#include "gpu/device_weights.hpp"

#include "base/error.hpp"
#include "model/device.hpp"

namespace sao::gpu {

bool cuda_transports_built() {
  return true;
}

std::string gpu_uuid_of(const torch::Device& device) {
  if (!device.is_cuda()) return "";
  return cuda_device_uuid(device.has_index() ? device.index() : 0);
}

model::DevicePackedTensors pack_for_rollouts(const torch::nn::Module& module, const torch::Device& device) {
  if (!device.is_cuda()) return model::pack_module_on_device(module, device);
  return pack_module_for_ipc(module, device);
}

std::string export_ipc(const model::DevicePackedTensors& packed) {
  return to_hex(export_ipc_handle(packed));
}

void load_ipc_into_module(torch::nn::Module& module, const std::string& handle_text,
                          const std::vector<model::PackedTensor>& index, const torch::Device& device,
                          const std::string& where) {
  try {
    const IpcImport imported(ipc_handle_from_hex(handle_text), index, device);
    model::load_device_packed_into_module(module, imported.packed(), where);
    // The copies read the exporter's memory: done before the mapping closes.
    model::synchronize(device);
  } catch (const Error& error) {
    const std::string text = error.what();
    if (text.rfind(where, 0) == 0) throw;
    throw Error(where + ": " + text);
  }
}

}  // namespace sao::gpu
