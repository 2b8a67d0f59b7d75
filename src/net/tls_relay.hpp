// A cluster port whose protocol another library parses (CAF's BASP): the
// gate (tls_gate.hpp) takes the public port, and each authenticated
// connection is carried, byte for byte, to a TLS listener on this machine's
// loopback (CAF's own, on a port of its own). A stranger's bytes never reach
// that parser: a crafted BASP header crashed CAF 0.17.6 with SIGSEGV before
// any handshake, and one claiming 1 GiB made it allocate that (issue 47).
#pragma once

#include "net/tls_gate.hpp"

#include <cstdint>
#include <memory>
#include <string>

namespace sao::net {

class TlsRelay {
 public:
  // Listens on host:port (0: any free port) for connections with the
  // cluster's certificates (`tls`, required) and carries each to
  // 127.0.0.1:upstream_port, as a TLS client with the same certificate.
  // Throws sao::Error naming `what` and the address or file.
  TlsRelay(const std::string& host, uint16_t port, const std::string& what, const TlsFiles& tls, uint16_t upstream_port,
           GateLimits limits = {});
  ~TlsRelay();  // stop()
  TlsRelay(const TlsRelay&) = delete;
  TlsRelay& operator=(const TlsRelay&) = delete;

  // Closes the port and every pending connection; relayed ones go on.
  void stop_accepting() { gate_->stop(); }
  // Also closes every relayed connection.
  void stop();
  uint16_t port() const { return gate_->port(); }
  GateStats stats() const { return gate_->stats(); }

 private:
  void relay(AdmittedConnection& client);
  std::string what_;
  uint16_t upstream_port_;
  std::unique_ptr<TlsContext> upstream_tls_;
  ConnectionThreads threads_;
  std::unique_ptr<TlsGate> gate_;  // last: it hands connections to the members above
};

}  // namespace sao::net
