// Which way one weight version travels from the learner to a rollout, and
// the calls the actors use for it whether or not this sao was built with
// the CUDA transports (-DSAO_WITH_CUDA): without them, CUDA IPC is never
// chosen and its calls throw sao::Error saying so.
#pragma once

#include "model/tensor_blob.hpp"

#include <string>

namespace sao::gpu {

enum class WeightTransport {
  kHostBytes,   // packed on the host; what CAF carries between processes
  kDeviceCopy,  // one device buffer shared within the process, copied GPU to GPU
  kCudaIpc,     // a CUDA IPC handle to the learner's buffer: same GPU, another process
};
const char* transport_name(WeightTransport transport);

// The rule (docs/decisions.md): weights on the host go as host bytes; a
// rollout in the learner's process takes the device buffer; a rollout in
// another process on the learner's GPU (same UUID) takes a CUDA IPC handle
// when the transports were built; anything else gets host bytes.
WeightTransport choose_transport(bool weights_on_device, bool same_process, const std::string& learner_gpu_uuid,
                                 const std::string& rollout_gpu_uuid, bool cuda_ipc_built);

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
