// Text form of CUDA IPC handles; see ipc_handle.hpp.
#include "gpu/ipc_handle.hpp"

#include "base/error.hpp"

#include <cstdio>

namespace sao::gpu {

std::string to_hex(const IpcHandle& handle) {
  std::string text;
  char byte[3];
  for (const char c : handle.bytes) {
    std::snprintf(byte, sizeof byte, "%02x", static_cast<unsigned char>(c));
    text += byte;
  }
  return text + ":" + std::to_string(handle.size) + ":" + handle.device_uuid;
}

IpcHandle ipc_handle_from_hex(const std::string& text) {
  const auto first = text.find(':');
  const auto second = first == std::string::npos ? first : text.find(':', first + 1);
  if (second == std::string::npos || first != 2 * 64) {
    throw Error("CUDA IPC handle: expected 128 hex digits, ':', the byte count, ':', the GPU UUID");
  }
  IpcHandle handle;
  for (size_t i = 0; i < 64; ++i) {
    const auto pair = text.substr(2 * i, 2);
    if (pair.find_first_not_of("0123456789abcdef") != std::string::npos) {
      throw Error("CUDA IPC handle: '" + pair + "' at byte " + std::to_string(i) + " is not lower-case hex");
    }
    handle.bytes[i] = static_cast<char>(std::stoi(pair, nullptr, 16));
  }
  const auto count = text.substr(first + 1, second - first - 1);
  if (count.empty() || count.size() > 19 || count.find_first_not_of("0123456789") != std::string::npos) {
    throw Error("CUDA IPC handle: byte count '" + count + "' is not a number");
  }
  handle.size = std::stoull(count);
  handle.device_uuid = text.substr(second + 1);
  return handle;
}

}  // namespace sao::gpu
