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

const Transport& Receiver::transport(Route route) const {
  for (const auto& candidate : transports_) {
    if (candidate->route() == route) return *candidate;
  }
  throw Error(std::string("weights: no transport for route ") + route_name(route));
}

bool Receiver::take(const Packet& packet, const std::string& where) {
  check_packet(packet, where);
  try {
    return transport(packet.route).take(packet, context_);
  } catch (const Error& error) {
    throw Error(where + ": " + error.what());
  }
}

Applied Receiver::apply(const Packet& packet, torch::nn::Module& module, const std::string& where) {
  transport(packet.route).load(packet, context_, module, where);
  Applied applied;
  applied.checksum = checksum_of_module(module, packet.tensors.index);
  applied.verified = applied.checksum == packet.checksum;
  return applied;
}

}  // namespace sao::weights
