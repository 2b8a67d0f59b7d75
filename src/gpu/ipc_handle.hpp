// A CUDA IPC memory handle as plain bytes, with what an importer checks
// (size, GPU), and its text form for a command line or a message. Plain
// data: no CUDA needed to carry or parse one (gpu/cuda_ipc.hpp uses it).
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace sao::gpu {

struct IpcHandle {
  std::array<char, 64> bytes{};  // cudaIpcMemHandle_t
  uint64_t size = 0;             // bytes of the exported buffer
  std::string device_uuid;       // "GPU-...": the importer must be on this GPU
};

// "<128 lower-case hex digits>:<size>:<uuid>". ipc_handle_from_hex throws
// sao::Error naming what is malformed.
std::string to_hex(const IpcHandle& handle);
IpcHandle ipc_handle_from_hex(const std::string& text);

}  // namespace sao::gpu
