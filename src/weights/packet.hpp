// One weight version on its way from the learner to a rollout: the one
// message form every transport uses. The route says how the tensor bytes
// travel and so which fields are filled (weights/transport.hpp has the
// transports; weights/sender.hpp chooses among them).
#pragma once

#include "model/tensor_blob.hpp"
#include "weights/delta.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace sao::weights {

enum class Route : uint8_t {
  kCafBytes = 0,     // the bytes inside the message; CAF carries them between processes
  kBulkChannel = 1,  // a notice: the bytes are read from the learner's bulk server (net/bulk_transfer.hpp)
  kDeviceCopy = 2,   // one device buffer shared within the process, copied GPU to GPU
  kCudaIpc = 3,      // a CUDA IPC handle to the learner's buffer: same GPU, another process
  kBf16Delta = 4,    // a bf16 replica's change since the version it holds, inside the message
};
constexpr uint8_t kRouteCount = 5;
const char* route_name(Route route);
// A route as a peer sent it (untrusted): nullopt for a value no route has.
std::optional<Route> route_from_value(uint8_t value);

struct Packet {
  int64_t version = 0;
  Route route = Route::kCafBytes;
  // weights::checksum_of the version as the learner packed it; the receiver
  // checks what it loaded against it.
  uint64_t checksum = 0;
  model::PackedTensors tensors;  // the index always; the bytes on kCafBytes only
  // Where the route's receiver reads the weights, as text: kCudaIpc's
  // handle; a new route's own address (so it needs no new field).
  std::string locator;
  uint16_t bulk_port = 0;   // kBulkChannel: the learner's bulk server
  uint64_t bulk_bytes = 0;  // kBulkChannel: the version's size there
  // kBf16Delta: the change from the receiver's version (delta.base_version)
  // to this one; the index is the bf16 version's, the checksum its image's.
  Delta delta;
  // kDeviceCopy (and the learner's own device pack): never serialised.
  std::shared_ptr<const model::DevicePackedTensors> on_device;
};

// The learner's packet of one version packed on the host (route kCafBytes,
// checksum set).
Packet host_packet(int64_t version, model::PackedTensors tensors);
// Of one version packed on a device (route kDeviceCopy, checksum set).
Packet device_packet(int64_t version, std::shared_ptr<const model::DevicePackedTensors> packed);

// The packet's tensor index: its own, or its device pack's (the learner's
// device packet may carry it only there).
const std::vector<model::PackedTensor>& index_of(const Packet& packet);

// Whether the packet carries a LoRA policy's adapters only (every entry an
// adapter tensor): a receiver must hold the version's frozen base already.
bool carries_adapters_only(const Packet& packet);

// Checks that a packet's fields agree with its route (bytes only on
// kCafBytes, a handle on kCudaIpc, a port and size on kBulkChannel, a
// device buffer on kDeviceCopy, a delta to this version on kBf16Delta). Throws sao::Error naming `where` and what
// is wrong: a peer's packet is untrusted.
void check_packet(const Packet& packet, const std::string& where);

}  // namespace sao::weights
