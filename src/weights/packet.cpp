// Routes and packets; see packet.hpp.
#include "weights/packet.hpp"

#include "model/lora_config.hpp"

#include <algorithm>

#include "base/error.hpp"
#include "weights/checksum.hpp"

namespace sao::weights {

const char* route_name(Route route) {
  switch (route) {
    case Route::kCafBytes:
      return "caf_bytes";
    case Route::kBulkChannel:
      return "bulk_channel";
    case Route::kDeviceCopy:
      return "device_copy";
    case Route::kCudaIpc:
      return "cuda_ipc";
    case Route::kBf16Delta:
      return "bf16_delta";
  }
  return "unknown";
}

std::optional<Route> route_from_value(uint8_t value) {
  if (value >= kRouteCount) return std::nullopt;
  return static_cast<Route>(value);
}

Packet host_packet(int64_t version, model::PackedTensors tensors) {
  Packet packet;
  packet.version = version;
  packet.route = Route::kCafBytes;
  packet.checksum = checksum_of(tensors);
  packet.tensors = std::move(tensors);
  return packet;
}

Packet device_packet(int64_t version, std::shared_ptr<const model::DevicePackedTensors> packed) {
  if (!packed) throw Error("device_packet: no device buffer");
  Packet packet;
  packet.version = version;
  packet.route = Route::kDeviceCopy;
  packet.checksum = checksum_of(*packed);
  packet.tensors.index = packed->index;
  packet.on_device = std::move(packed);
  return packet;
}

const std::vector<model::PackedTensor>& index_of(const Packet& packet) {
  return packet.on_device && packet.tensors.index.empty() ? packet.on_device->index : packet.tensors.index;
}

bool carries_adapters_only(const Packet& packet) {
  const auto& index = index_of(packet);
  return !index.empty() && std::all_of(index.begin(), index.end(), [](const model::PackedTensor& entry) {
    return model::is_lora_tensor_name(entry.name);
  });
}

void check_packet(const Packet& packet, const std::string& where) {
  const auto fail = [&](const std::string& what) {
    throw Error(where + ": a " + route_name(packet.route) + " packet " + what);
  };
  if (!route_from_value(static_cast<uint8_t>(packet.route))) {
    throw Error(where + ": unknown weight route " + std::to_string(static_cast<int>(packet.route)));
  }
  if (packet.version < 0) fail("has a negative version " + std::to_string(packet.version));
  if (packet.tensors.index.empty()) fail("has no tensor index");
  const bool bytes = !packet.tensors.bytes.empty();
  const bool handle = !packet.locator.empty();
  const bool bulk = packet.bulk_port != 0 || packet.bulk_bytes != 0;
  const bool device = packet.on_device != nullptr;
  const bool delta = packet.delta.version != 0 || packet.delta.base_version != 0 || !packet.delta.payload.empty() ||
                     packet.delta.changed != 0 || packet.delta.elements != 0;
  if (delta && packet.route != Route::kBf16Delta) fail("carries a delta");
  switch (packet.route) {
    case Route::kCafBytes:
      if (!bytes || handle || bulk || device) fail("must carry the bytes and nothing else");
      break;
    case Route::kBulkChannel:
      if (packet.bulk_port == 0 || bytes || handle || device) fail("must carry a bulk port and no bytes");
      break;
    case Route::kDeviceCopy:
      if (!device || bytes || handle || bulk) fail("must carry a device buffer and nothing else");
      break;
    case Route::kCudaIpc:
      if (!handle || bytes || bulk || device) fail("must carry an IPC handle and nothing else");
      break;
    case Route::kBf16Delta:
      if (bytes || handle || bulk || device) fail("must carry the delta and nothing else");
      if (packet.delta.version != packet.version) {
        fail("is a delta to v" + std::to_string(packet.delta.version) + ", not v" + std::to_string(packet.version));
      }
      if (packet.delta.base_version < 0 || packet.delta.base_version >= packet.version) {
        fail("has base v" + std::to_string(packet.delta.base_version) + ", not an earlier version");
      }
      if (packet.delta.changed > packet.delta.elements) {
        fail("changes " + std::to_string(packet.delta.changed) + " of " + std::to_string(packet.delta.elements) +
             " elements");
      }
      break;
  }
}

}  // namespace sao::weights
