// Where a node's TLS files are; CAF-free, so the CLI's node options can
// carry it (see cluster.hpp for how the cluster uses it).
#pragma once

#include "net/tls_link.hpp"

#include <string>

namespace sao::actors {

// A directory made by deploy/cluster-certs for one node: ca.crt (the
// cluster's CA), node.crt (this node's certificate, signed by it), node.key.
struct ClusterTls {
  std::string dir;  // "" = none (a cluster node refuses to start)
  bool enabled() const { return !dir.empty(); }
  std::string ca_file() const { return dir + "/ca.crt"; }
  std::string certificate_file() const { return dir + "/node.crt"; }
  std::string key_file() const { return dir + "/node.key"; }
  // The same files for sockets sao opens itself (the gate, the bulk weight
  // channel); empty when no directory is set.
  net::TlsFiles files() const {
    if (!enabled()) return {};
    return {ca_file(), certificate_file(), key_file()};
  }
};

// Throws sao::Error naming `flag` and the file when one of the three files is
// missing or unreadable.
void check_cluster_tls(const ClusterTls& tls, const std::string& flag);

// Throws sao::Error naming `what` unless `tls` is enabled: every cluster
// port speaks TLS with the cluster's CA, on loopback too (issue 47).
void require_cluster_tls(const std::string& what, const ClusterTls& tls);

}  // namespace sao::actors
