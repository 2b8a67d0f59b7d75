// The learner side of weight sync: the one place that chooses how a version
// reaches each receiver. The weight-sync actor holds one Sender; it asks for
// a route per push and has the chosen transport make the packet (once per
// version and route: the actor keeps the made packets as messages).
#pragma once

#include "weights/transport.hpp"

#include <map>
#include <set>

namespace sao::weights {

class Sender {
 public:
  explicit Sender(std::shared_ptr<net::BulkServer> bulk_server = nullptr);

  // The first transport, in make_transports() order, that reaches the
  // receiver and that it has not refused. CAF bytes reach everyone.
  Route choose(const Packet& source, const std::string& receiver, const Placement& placement) const;
  // The packet carrying `source` by `route` (see Transport::carry). The
  // source packet itself is the packet of its own route: callers send it
  // as it is rather than asking for a copy.
  Packet carry(Route route, const Packet& source, const std::shared_ptr<const void>& source_owner) const;
  bool reads_source_in_place(Route route) const;
  // A receiver could not use `route` (a failed read, a refused handle, a
  // checksum that did not match): it gets the next route from now on. CAF
  // bytes are the last resort and are never refused. True when this is new.
  bool refuse(const std::string& receiver, Route route);
  // A receiver registered anew (or left): it may try every route again.
  void forget(const std::string& receiver);
  size_t refusals() const;

 private:
  std::vector<std::unique_ptr<Transport>> transports_;
  std::map<std::string, std::set<Route>> refused_;
};

}  // namespace sao::weights
