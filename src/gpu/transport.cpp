// The transport rule; see transport.hpp. (The CUDA calls are in
// transport_cuda.cpp, or transport_host_only.cpp without the transports.)
#include "gpu/transport.hpp"

namespace sao::gpu {

const char* transport_name(WeightTransport transport) {
  switch (transport) {
    case WeightTransport::kHostBytes:
      return "host_bytes";
    case WeightTransport::kDeviceCopy:
      return "device_copy";
    case WeightTransport::kCudaIpc:
      return "cuda_ipc";
  }
  return "unknown";
}

WeightTransport choose_transport(bool weights_on_device, bool same_process, const std::string& learner_gpu_uuid,
                                 const std::string& rollout_gpu_uuid, bool cuda_ipc_built) {
  if (!weights_on_device) return WeightTransport::kHostBytes;
  if (same_process) return WeightTransport::kDeviceCopy;
  if (cuda_ipc_built && !learner_gpu_uuid.empty() && learner_gpu_uuid == rollout_gpu_uuid) {
    return WeightTransport::kCudaIpc;
  }
  return WeightTransport::kHostBytes;
}

}  // namespace sao::gpu
