// Taking and loading a packet; see receiver.hpp.
#include "weights/receiver.hpp"

#include "base/error.hpp"
#include "weights/checksum.hpp"

namespace sao::weights {

Receiver::Receiver(torch::Device device, std::shared_ptr<net::SharedBulkReader> bulk_reader)
    : transports_(make_transports()) {
  context_.device = device;
  context_.bulk_reader = std::move(bulk_reader);
}

bool Receiver::take(const Packet& packet, const std::string& where) {
  check_packet(packet, where);
  try {
    return transport_of(transports_, packet.route).take(packet, context_);
  } catch (const Error& error) {
    throw Error(where + ": " + error.what());
  }
}

Applied Receiver::apply(const Packet& packet, torch::nn::Module& module, const std::string& where) {
  transport_of(transports_, packet.route).load(packet, context_, module, where);
  Applied applied;
  applied.checksum = checksum_of_module(module, packet.tensors.index);
  applied.verified = applied.checksum == packet.checksum;
  // What a later delta applies to: a version only when its bytes are right.
  context_.held_version = applied.verified ? packet.version : -1;
  return applied;
}

}  // namespace sao::weights
