// The ways one weight version travels from the learner to a rollout, behind
// one interface. A transport is used on both sides: the sender asks whether
// it reaches a receiver and has it make the packet (weights/sender.hpp); the
// receiver has it take what cannot wait and load the weights
// (weights/receiver.hpp). A new transport is a class here, a Route, its
// place in make_transports(), and its test (CONTRIBUTING.md).
#pragma once

#include "weights/delta.hpp"
#include "weights/packet.hpp"

#include <memory>
#include <string>
#include <vector>

namespace sao::net {
class BulkServer;
class SharedBulkReader;
}  // namespace sao::net

namespace sao::weights {

// Where a receiver runs, as the sender needs it to choose a route.
struct Placement {
  std::string device = "cpu";  // e.g. "cuda:1"
  std::string gpu_uuid;        // "" on the CPU, or where CUDA IPC was refused
  bool same_process = false;   // the receiver is in the learner's process
  bool bf16_replica = false;   // it loads bf16 versions (weights/replica.hpp) and deltas
  int64_t version = -1;        // the version it holds (acknowledged), -1 for none
};

// What a receiver's routes need beside the packet.
struct ReceiverContext {
  torch::Device device = torch::kCPU;
  std::shared_ptr<net::SharedBulkReader> bulk_reader;  // null where no bulk channel is reachable
  // The bulk channel's bytes, read on arrival and kept until applied (the
  // buffer is shared with this process's other receivers, never written).
  std::shared_ptr<const std::vector<char>> taken_bytes;
  // The version the receiver's model holds, checked (a delta needs it as
  // its base); -1 before the first.
  int64_t held_version = -1;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual Route route() const = 0;
  // Sender: whether this route can carry `source` (the learner's own packet)
  // to a receiver placed so.
  virtual bool reaches(const Packet& source, const Placement& receiver) const = 0;
  // Sender: the packet that carries `source` this way; `source_owner` keeps
  // the source's buffers alive while the route serves them. Throws
  // sao::Error when it cannot (a buffer CUDA cannot share).
  virtual Packet carry(const Packet& source, const std::shared_ptr<const void>& source_owner,
                       const Placement& receiver) const = 0;
  // Sender: receivers whose keys are equal get the same packet of a version
  // (made once, shared); a delta's depends on the version a receiver holds.
  virtual int64_t packet_key(const Placement&) const { return -1; }
  // Sender: the learner's buffer must live until the receiver acknowledges
  // (the receiver reads it in place).
  virtual bool reads_source_in_place() const { return false; }
  // Receiver, on arrival: what cannot wait (the bulk channel reads its bytes
  // while the server still holds the version). False when they were not
  // there any more: the receiver asks for the newest version again.
  virtual bool take(const Packet&, ReceiverContext&) const { return true; }
  // Receiver: loads the weights into `module`. Throws sao::Error naming
  // `where`; a packet whose index does not fit leaves the module unchanged.
  virtual void load(const Packet& packet, ReceiverContext& context, torch::nn::Module& module,
                    const std::string& where) const = 0;
};

// Every transport, in the order the sender prefers them: the device copy,
// CUDA IPC, a bf16 delta (to a bf16 replica in another process whose
// version `deltas` still holds; none without `deltas`), the bulk channel
// (it reaches receivers only when `bulk_server` is given: a cluster
// learner's; a receiver needs none), and CAF bytes, which reach everyone.
std::vector<std::unique_ptr<Transport>> make_transports(std::shared_ptr<net::BulkServer> bulk_server = nullptr,
                                                        std::shared_ptr<const DeltaHistory> deltas = nullptr);
// The transport of `route` among `transports`; throws sao::Error when none is.
const Transport& transport_of(const std::vector<std::unique_ptr<Transport>>& transports, Route route);

}  // namespace sao::weights
