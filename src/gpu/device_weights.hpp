// The GPU calls weight sync uses (weights/transports.cpp), whether or not
// this sao was built with the CUDA transports (-DSAO_WITH_CUDA): without
// them no GPU UUID is known, so CUDA IPC is never chosen, and its calls
// throw sao::Error saying so.
#pragma once

#include "model/tensor_blob.hpp"

#include <string>

namespace sao::gpu {

// Whether this sao has the CUDA IPC and NCCL transports (sao_gpu).
bool cuda_transports_built();

// The UUID of the GPU `device` names ("GPU-..."); "" for the CPU, or when
// the transports were not built (the UUID then decides nothing).
std::string gpu_uuid_of(const torch::Device& device);

// The learner's pack of one version on `device`: a buffer CUDA IPC can
// share when the transports were built, else model::pack_module_on_device.
model::DevicePackedTensors pack_for_rollouts(const torch::nn::Module& module, const torch::Device& device);

// The handle of a pack_for_rollouts buffer, as text. Throws sao::Error when
// the transports were not built or the buffer cannot be shared.
std::string export_ipc(const model::DevicePackedTensors& packed);

// Opens `handle_text` on `device`, copies the weights described by `index`
// into the module GPU to GPU, waits, and closes it. Throws sao::Error naming
// `where` (another GPU, a malformed handle, an index that does not fit).
void load_ipc_into_module(torch::nn::Module& module, const std::string& handle_text,
                          const std::vector<model::PackedTensor>& index, const torch::Device& device,
                          const std::string& where);

}  // namespace sao::gpu
