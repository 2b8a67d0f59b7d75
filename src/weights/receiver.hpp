// The rollout side of weight sync: takes a packet on arrival, loads it into
// the rollout's model by its route, and checks what it loaded against the
// version's checksum.
#pragma once

#include "weights/transport.hpp"

namespace sao::weights {

// A packet loaded: what the receiver's model now holds, checked.
struct Applied {
  uint64_t checksum = 0;  // of the model's tensors after loading
  bool verified = false;  // equal to the packet's checksum
};

class Receiver {
 public:
  Receiver(torch::Device device, std::shared_ptr<net::SharedBulkReader> bulk_reader);

  // On arrival, before the packet may wait (for a turn boundary): checks it
  // and takes what cannot wait. False when the bytes were not there any
  // more (ask for the newest version again). Throws sao::Error naming
  // `where` for a malformed packet or a route that failed.
  bool take(const Packet& packet, const std::string& where);
  // Loads a taken packet into `module` and checks it. Throws sao::Error
  // naming `where` when the route fails (the module unchanged where the
  // route validates first: every route but CUDA IPC's mapping).
  Applied apply(const Packet& packet, torch::nn::Module& module, const std::string& where);

 private:
  std::vector<std::unique_ptr<Transport>> transports_;
  ReceiverContext context_;
};

}  // namespace sao::weights
