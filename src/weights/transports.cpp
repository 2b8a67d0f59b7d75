// The five transports; see transport.hpp.
#include "weights/transport.hpp"

#include "base/error.hpp"
#include "gpu/device_weights.hpp"
#include "net/bulk_transfer.hpp"
#include "weights/replica.hpp"

namespace sao::weights {

namespace {

// The bytes inside the message: reaches every receiver.
class CafBytes final : public Transport {
 public:
  Route route() const override { return Route::kCafBytes; }
  bool reaches(const Packet&, const Placement&) const override { return true; }
  Packet carry(const Packet& source, const std::shared_ptr<const void>&, const Placement&) const override {
    Packet packet;
    packet.version = source.version;
    packet.checksum = source.checksum;
    packet.route = Route::kCafBytes;
    packet.tensors = source.on_device ? model::download(*source.on_device) : source.tensors;
    return packet;
  }
  void load(const Packet& packet, ReceiverContext&, torch::nn::Module& module,
            const std::string& where) const override {
    model::load_packed_into_module(module, packet.tensors, where);
  }
};

// A notice through CAF; the bytes from the learner's bulk server.
class BulkChannel final : public Transport {
 public:
  explicit BulkChannel(std::shared_ptr<net::BulkServer> server) : server_(std::move(server)) {}
  Route route() const override { return Route::kBulkChannel; }
  bool reaches(const Packet&, const Placement& receiver) const override {
    // The server and a node's shared reader keep one form of a version, the
    // learner's: a bf16 replica gets its own form as a delta or CAF bytes.
    return server_ != nullptr && !receiver.same_process && !receiver.bf16_replica;
  }
  Packet carry(const Packet& source, const std::shared_ptr<const void>& source_owner, const Placement&) const override {
    if (!server_) throw Error("bulk channel: this sender has no bulk server");
    // The server serves host bytes: a device version is downloaded once here
    // and that copy is what the server keeps alive.
    std::shared_ptr<const void> owner = source_owner;
    const model::PackedTensors* host = &source.tensors;
    if (source.on_device) {
      auto downloaded = std::make_shared<const model::PackedTensors>(model::download(*source.on_device));
      host = downloaded.get();
      owner = downloaded;
    }
    server_->publish(source.version, host->bytes.data(), host->bytes.size(), owner);
    Packet notice;
    notice.version = source.version;
    notice.checksum = source.checksum;
    notice.route = Route::kBulkChannel;
    notice.tensors.index = host->index;
    notice.bulk_port = server_->port();
    notice.bulk_bytes = host->bytes.size();
    return notice;
  }
  bool take(const Packet& packet, ReceiverContext& context) const override {
    if (!context.bulk_reader) throw Error("this receiver has no reader for the bulk channel");
    context.taken_bytes = context.bulk_reader->read(packet.bulk_port, packet.version, packet.bulk_bytes);
    return context.taken_bytes != nullptr;
  }
  void load(const Packet& packet, ReceiverContext& context, torch::nn::Module& module,
            const std::string& where) const override {
    if (!context.taken_bytes) throw Error(where + ": the bulk channel's bytes were not read");
    // Released once applied, so the reader can reuse the buffer.
    const auto bytes = std::move(context.taken_bytes);
    model::load_packed_into_module(module, packet.tensors.index, bytes->data(), bytes->size(), where);
  }

 private:
  std::shared_ptr<net::BulkServer> server_;
};

// The learner's device buffer, read in this process.
class DeviceCopy final : public Transport {
 public:
  Route route() const override { return Route::kDeviceCopy; }
  bool reaches(const Packet& source, const Placement& receiver) const override {
    return source.on_device != nullptr && receiver.same_process;
  }
  Packet carry(const Packet& source, const std::shared_ptr<const void>&, const Placement&) const override {
    if (!source.on_device) throw Error("device copy: the version is not on a device");
    return device_packet_of(source);
  }
  bool reads_source_in_place() const override { return true; }
  void load(const Packet& packet, ReceiverContext&, torch::nn::Module& module,
            const std::string& where) const override {
    model::load_device_packed_into_module(module, *packet.on_device, where);
  }

 private:
  static Packet device_packet_of(const Packet& source) {
    Packet packet;
    packet.version = source.version;
    packet.checksum = source.checksum;
    packet.route = Route::kDeviceCopy;
    packet.tensors.index = source.tensors.index;
    packet.on_device = source.on_device;
    return packet;
  }
};

// A CUDA IPC handle to the learner's buffer: another process on its GPU.
class CudaIpc final : public Transport {
 public:
  Route route() const override { return Route::kCudaIpc; }
  bool reaches(const Packet& source, const Placement& receiver) const override {
    // Only the learner's own buffer is an allocation IPC can share (its own
    // cudaMalloc); a bf16 replica's form is not, so it gets deltas instead.
    if (!source.on_device || receiver.same_process || receiver.bf16_replica || !gpu::cuda_transports_built()) {
      return false;
    }
    if (receiver.gpu_uuid.empty()) return false;
    return gpu::gpu_uuid_of(source.on_device->buffer.device()) == receiver.gpu_uuid;
  }
  Packet carry(const Packet& source, const std::shared_ptr<const void>&, const Placement&) const override {
    if (!source.on_device) throw Error("CUDA IPC: the version is not on a device");
    Packet packet;
    packet.version = source.version;
    packet.checksum = source.checksum;
    packet.route = Route::kCudaIpc;
    packet.tensors.index = source.on_device->index;
    packet.locator = gpu::export_ipc(*source.on_device);
    return packet;
  }
  bool reads_source_in_place() const override { return true; }
  void load(const Packet& packet, ReceiverContext& context, torch::nn::Module& module,
            const std::string& where) const override {
    // A handle only means something to a receiver on a GPU (a peer may send one anyway).
    if (!context.device.is_cuda()) throw Error(where + ": a CUDA IPC handle for a receiver that runs on the CPU");
    gpu::load_ipc_into_module(module, packet.locator, packet.tensors.index, context.device, where);
  }
};

// A bf16 replica in another process gets only the elements whose bf16
// value changed since the version it holds, inside the message. It
// rebuilds its image from its own model, applies the delta (which checks
// the result against the version's checksum) and loads the image back.
class Bf16DeltaRoute final : public Transport {
 public:
  explicit Bf16DeltaRoute(std::shared_ptr<const DeltaHistory> deltas) : deltas_(std::move(deltas)) {}
  Route route() const override { return Route::kBf16Delta; }
  bool reaches(const Packet& source, const Placement& receiver) const override {
    if (!deltas_ || !receiver.bf16_replica || receiver.same_process || !is_bf16_version(source)) return false;
    const auto* newest = deltas_->newest();
    return newest != nullptr && newest->version == source.version && deltas_->has_delta_for(receiver.version);
  }
  int64_t packet_key(const Placement& receiver) const override { return receiver.version; }
  Packet carry(const Packet& source, const std::shared_ptr<const void>&, const Placement& receiver) const override {
    auto delta = deltas_ ? deltas_->delta_for(receiver.version) : std::nullopt;
    if (!delta || delta->version != source.version) {
      throw Error("bf16 delta: no delta from v" + std::to_string(receiver.version) + " to v" +
                  std::to_string(source.version));
    }
    Packet packet;
    packet.version = source.version;
    packet.checksum = delta->checksum;
    packet.route = Route::kBf16Delta;
    packet.tensors.index = index_of(source);
    packet.delta = std::move(*delta);
    return packet;
  }
  void load(const Packet& packet, ReceiverContext& context, torch::nn::Module& module,
            const std::string& where) const override {
    if (packet.delta.base_version != context.held_version) {
      throw Error(where + ": a bf16 delta from v" + std::to_string(packet.delta.base_version) +
                  ", but this receiver holds v" + std::to_string(context.held_version));
    }
    auto image = image_of_module(module, packet.tensors.index, context.held_version);
    try {
      apply_delta(image, packet.delta);
    } catch (const Error& error) {
      throw Error(where + ": " + error.what());
    }
    load_image_into_module(image, packet.tensors.index, module, where);
  }

 private:
  std::shared_ptr<const DeltaHistory> deltas_;
};

}  // namespace

const Transport& transport_of(const std::vector<std::unique_ptr<Transport>>& transports, Route route) {
  for (const auto& candidate : transports) {
    if (candidate->route() == route) return *candidate;
  }
  throw Error(std::string("weights: no transport for route ") + route_name(route));
}

std::vector<std::unique_ptr<Transport>> make_transports(std::shared_ptr<net::BulkServer> bulk_server,
                                                        std::shared_ptr<const DeltaHistory> deltas) {
  std::vector<std::unique_ptr<Transport>> transports;
  transports.push_back(std::make_unique<DeviceCopy>());
  transports.push_back(std::make_unique<CudaIpc>());
  transports.push_back(std::make_unique<Bf16DeltaRoute>(std::move(deltas)));
  transports.push_back(std::make_unique<BulkChannel>(std::move(bulk_server)));
  transports.push_back(std::make_unique<CafBytes>());
  return transports;
}

}  // namespace sao::weights
