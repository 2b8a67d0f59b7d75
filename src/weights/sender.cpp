// Route choice; see sender.hpp.
#include "weights/sender.hpp"

#include "base/error.hpp"

namespace sao::weights {

Sender::Sender(std::shared_ptr<net::BulkServer> bulk_server)
    : deltas_(std::make_shared<DeltaHistory>(kDeltaAnchorEvery, kDeltaVersionsKept)),
      transports_(make_transports(std::move(bulk_server), deltas_)) {}

Route Sender::choose(const Packet& source, const std::string& receiver, const Placement& placement) const {
  const auto refused = refused_.find(receiver);
  for (const auto& candidate : transports_) {
    if (refused != refused_.end() && refused->second.count(candidate->route()) > 0) continue;
    if (candidate->reaches(source, placement)) return candidate->route();
  }
  return Route::kCafBytes;
}

Packet Sender::carry(Route route, const Packet& source, const std::shared_ptr<const void>& source_owner,
                     const Placement& placement) const {
  return transport_of(transports_, route).carry(source, source_owner, placement);
}

int64_t Sender::packet_key(Route route, const Placement& placement) const {
  return transport_of(transports_, route).packet_key(placement);
}

void Sender::add_replica_version(Bf16Image image) {
  deltas_->add(std::move(image));
}

bool Sender::reads_source_in_place(Route route) const {
  return transport_of(transports_, route).reads_source_in_place();
}

bool Sender::refuse(const std::string& receiver, Route route) {
  if (route == Route::kCafBytes) return false;
  return refused_[receiver].insert(route).second;
}

void Sender::forget(const std::string& receiver) {
  refused_.erase(receiver);
}

size_t Sender::refusals() const {
  size_t count = 0;
  for (const auto& item : refused_) count += item.second.size();
  return count;
}

}  // namespace sao::weights
