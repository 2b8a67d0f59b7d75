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
  // Deltas for bf16 replicas: a full version every kDeltaAnchorEvery
  // versions (how long an undetected error could live, were one possible;
  // measured: about 0.10 of the full bytes at 32), and the images of the
  // newest kDeltaVersionsKept versions (2 bytes a parameter each, on the
  // learner's host): a replica further behind gets the full version.
  static constexpr int64_t kDeltaAnchorEvery = 32;
  static constexpr size_t kDeltaVersionsKept = 3;

  explicit Sender(std::shared_ptr<net::BulkServer> bulk_server = nullptr);

  // The first transport, in make_transports() order, that reaches the
  // receiver and that it has not refused. CAF bytes reach everyone.
  Route choose(const Packet& source, const std::string& receiver, const Placement& placement) const;
  // The packet carrying `source` by `route` (see Transport::carry). The
  // source packet itself is the packet of its own route: callers send it
  // as it is rather than asking for a copy.
  Packet carry(Route route, const Packet& source, const std::shared_ptr<const void>& source_owner,
               const Placement& placement) const;
  // Receivers with equal keys share the packet `route` makes of a version.
  int64_t packet_key(Route route, const Placement& placement) const;
  // The bf16 image of a whole version (weights/replica.hpp), newest last:
  // what deltas to bf16 replicas are made from.
  void add_replica_version(Bf16Image image);
  const DeltaHistory& deltas() const { return *deltas_; }
  bool reads_source_in_place(Route route) const;
  // A receiver could not use `route` (a failed read, a refused handle, a
  // checksum that did not match): it gets the next route from now on. CAF
  // bytes are the last resort and are never refused. True when this is new.
  bool refuse(const std::string& receiver, Route route);
  // A receiver registered anew (or left): it may try every route again.
  void forget(const std::string& receiver);
  size_t refusals() const;

 private:
  std::shared_ptr<DeltaHistory> deltas_;
  std::vector<std::unique_ptr<Transport>> transports_;
  std::map<std::string, std::set<Route>> refused_;
};

}  // namespace sao::weights
