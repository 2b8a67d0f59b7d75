// Where a node's TLS files are; CAF-free, so the CLI's node options can
// carry it (see cluster.hpp for how the cluster uses it).
#pragma once

#include "net/tls_link.hpp"

#include <string>

namespace sao::actors {

// A directory made by deploy/cluster-certs for one node: ca.crt (the
// cluster's CA), node.crt (this node's certificate, signed by it), node.key.
struct ClusterTls {
  std::string dir;  // "" = plaintext
  bool enabled() const { return !dir.empty(); }
  std::string ca_file() const { return dir + "/ca.crt"; }
  std::string certificate_file() const { return dir + "/node.crt"; }
  std::string key_file() const { return dir + "/node.key"; }
  // The same files for sockets sao opens itself (the bulk weight channel);
  // empty (plaintext) when TLS is off.
  net::TlsFiles files() const {
    if (!enabled()) return {};
    return {ca_file(), certificate_file(), key_file()};
  }
};

// Throws sao::Error naming `flag` and the file when one of the three files is
// missing or unreadable.
void check_cluster_tls(const ClusterTls& tls, const std::string& flag);

// True for 127.0.0.0/8, ::1 and "localhost".
bool is_loopback_host(const std::string& host);

// Throws sao::Error unless `tls` is enabled, `host` is loopback, or
// `insecure_plaintext` was asked for; `what` says whose address it is.
void require_encryption(const std::string& what, const std::string& host, const ClusterTls& tls,
                        bool insecure_plaintext);

}  // namespace sao::actors
