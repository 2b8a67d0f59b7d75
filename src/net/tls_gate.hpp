// The door of every port a cluster listens on (the CAF port through
// net/tls_relay.hpp, the bulk weight channel). Nothing behind it sees a byte
// of a connection before that connection has completed a mutually
// authenticated TLS handshake with a certificate signed by the cluster's CA.
// Until then a connection is "pending", and pending connections are bounded
// in number (in total and per peer address), in time (a handshake deadline)
// and by the descriptors left to the process: 1,200 idle connections once
// took a learner to its descriptor limit, after which its checkpoint failed
// with "Too many open files" (issue 47).
#pragma once

#include "net/tls_link.hpp"

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace sao::net {

struct GateLimits {
  // Pending connections in total and from one address. When either is full,
  // the oldest pending one (of that address, or of all) is closed to make
  // room: a flood of idle connections pushes out only its own kind, and a
  // node's handshake, which takes a round trip or two, gets through.
  size_t max_pending = 64;
  size_t max_pending_per_address = 16;
  int64_t handshake_deadline_ms = 10000;
  // Authenticated connections open at once; more are closed on arrival.
  size_t max_admitted = 512;
  // A new connection is closed at once when fewer descriptors than this
  // would be left below the process's limit: checkpoints, metrics and logs
  // can count on these.
  int descriptor_reserve = 128;
};

struct GateStats {
  int64_t accepted = 0;          // connections taken from the listening socket
  int64_t admitted = 0;          // completed the handshake and handed on
  int64_t evicted = 0;           // pending, closed to make room for a newer one
  int64_t timed_out = 0;         // pending past the handshake deadline
  int64_t failed_handshake = 0;  // no certificate of this cluster, or not TLS at all
  int64_t refused_full = 0;      // authenticated, but max_admitted were open
  int64_t refused_reserve = 0;   // closed at once to keep the descriptor reserve
  int64_t pending = 0;           // now
  int64_t open_admitted = 0;     // now
};

// An authenticated connection, as the gate hands it on: a blocking socket
// and its TLS session (none when the gate is plaintext). Closes both when
// destroyed, which frees its place among max_admitted.
class AdmittedConnection {
 public:
  AdmittedConnection(int fd, ssl_st* session, std::string peer, std::shared_ptr<std::atomic<int64_t>> open_count);
  ~AdmittedConnection();
  AdmittedConnection(const AdmittedConnection&) = delete;
  AdmittedConnection& operator=(const AdmittedConnection&) = delete;
  int fd() const { return fd_; }
  Link& link() { return *link_; }
  const std::string& peer() const { return peer_; }

 private:
  int fd_;
  std::unique_ptr<Link> link_;
  std::string peer_;
  std::shared_ptr<std::atomic<int64_t>> open_count_;
};

// Raises the soft limit on open descriptors to the hard limit (what a
// process may do without privileges) and returns the limit now in force.
uint64_t raise_descriptor_limit();

class TlsGate {
 public:
  // Called on the gate's thread for each authenticated connection; it must
  // not block (hand the connection to a thread of its own).
  using Handler = std::function<void(std::unique_ptr<AdmittedConnection>)>;

  // Listens on host:port (0: any free port); throws sao::Error naming `what`
  // and the address, or a certificate file that cannot be loaded. With `tls`
  // empty the gate applies its bounds but no handshake (unit tests of the
  // protocols behind it; a cluster node always passes its certificates).
  TlsGate(const std::string& host, uint16_t port, const std::string& what, const TlsFiles& tls, GateLimits limits,
          Handler on_admitted);
  ~TlsGate();  // stop()
  TlsGate(const TlsGate&) = delete;
  TlsGate& operator=(const TlsGate&) = delete;

  // Stops accepting and closes every pending connection; returns once the
  // gate's thread has ended. Admitted connections belong to the handler.
  void stop();
  uint16_t port() const { return port_; }
  bool encrypted() const { return tls_ != nullptr; }
  GateStats stats() const;

 private:
  struct Pending;
  void run();
  bool accept_ready(std::vector<Pending>& pending);  // false: out of descriptors
  bool advance_handshake(Pending& connection);       // false: done with it (admitted or closed)
  void admit(Pending& connection);
  void count(int64_t GateStats::*counter);

  std::string what_;
  GateLimits limits_;
  Handler on_admitted_;
  std::unique_ptr<TlsContext> tls_;
  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  uint16_t port_ = 0;
  uint64_t descriptor_limit_ = 0;
  std::shared_ptr<std::atomic<int64_t>> open_admitted_;
  mutable std::mutex mutex_;
  GateStats stats_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

// The threads of admitted connections: each serves one connection until it
// ends; stop() shuts every connection's socket down (so a thread blocked in
// a read returns) and joins them all.
class ConnectionThreads {
 public:
  ConnectionThreads() = default;
  ~ConnectionThreads();  // stop()
  ConnectionThreads(const ConnectionThreads&) = delete;
  ConnectionThreads& operator=(const ConnectionThreads&) = delete;
  // Runs serve(connection) on a thread of its own (SIGPIPE blocked there),
  // then closes the connection. After stop() the connection is closed at once.
  void spawn(std::unique_ptr<AdmittedConnection> connection, std::function<void(AdmittedConnection&)> serve);
  // A socket the serving thread opened after it started (shut down by stop()).
  void watch(int fd);
  void unwatch(int fd);
  void stop();

 private:
  void join_finished();
  std::mutex mutex_;
  bool stopping_ = false;
  std::set<int> sockets_;
  std::map<uint64_t, std::thread> threads_;
  std::vector<uint64_t> finished_;
  uint64_t next_ = 0;
};

}  // namespace sao::net
