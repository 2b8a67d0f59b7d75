// The gate in front of every cluster port (net/tls_gate.hpp): connections
// that have not authenticated are bounded per address (the oldest is closed
// for a newer one), by a handshake deadline and by the descriptor reserve,
// and are closed when the gate stops; a peer with the cluster's certificate
// gets through a flood of idle connections from its own address. Every wait
// below ends on an event (a close the test reads, a connection handed on).
#include "base/tcp_socket.hpp"
#include "net/tls_gate.hpp"
#include "net/tls_relay.hpp"

#include <doctest/doctest.h>

#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
using sao::net::AdmittedConnection;
using sao::net::GateLimits;
using sao::net::TlsGate;

namespace {

struct Certificates {
  fs::path dir = fs::temp_directory_path() / ("sao_gate_" + std::to_string(::getpid()));
  Certificates() {
    fs::remove_all(dir);
    const std::string script = std::string(SAO_SOURCE_DIR) + "/deploy/cluster-certs";
    REQUIRE(std::system((script + " '" + dir.string() + "' learner node-1 > /dev/null").c_str()) == 0);
  }
  ~Certificates() { fs::remove_all(dir); }
  sao::net::TlsFiles files(const std::string& node) const {
    return {(dir / node / "ca.crt").string(), (dir / node / "node.crt").string(), (dir / node / "node.key").string()};
  }
};

// Collects what the gate hands on.
struct Admitted {
  std::mutex mutex;
  std::condition_variable arrived;
  std::vector<std::unique_ptr<AdmittedConnection>> connections;
  TlsGate::Handler handler() {
    return [this](std::unique_ptr<AdmittedConnection> connection) {
      std::lock_guard<std::mutex> lock(mutex);
      connections.push_back(std::move(connection));
      arrived.notify_all();
    };
  }
  void await(size_t count) {
    std::unique_lock<std::mutex> lock(mutex);
    arrived.wait(lock, [&] { return connections.size() >= count; });
  }
};

// No descriptor reserve (a test process's own descriptors vary), this deadline.
GateLimits limits_with_deadline(int64_t handshake_deadline_ms) {
  GateLimits limits;
  limits.handshake_deadline_ms = handshake_deadline_ms;
  limits.descriptor_reserve = 0;
  return limits;
}

int connect_idle(uint16_t port) {
  std::string problem;
  const int fd = sao::base::connect_tcp("127.0.0.1", port, 20000, &problem);
  REQUIRE_MESSAGE(fd >= 0, problem);
  sao::base::set_blocking_with_timeouts(fd, 0);
  return fd;
}

// Blocks until the gate closes the connection; true when it did (end of
// stream or a reset), false when it sent bytes instead.
bool closed_by_gate(int fd) {
  char byte = 0;
  const auto got = ::recv(fd, &byte, 1, 0);
  ::close(fd);
  return got <= 0;
}

}  // namespace

TEST_CASE("gate: a flood of idle connections is bounded per address, and a node's handshake still gets through") {
  Certificates certs;
  Admitted admitted;
  auto limits = limits_with_deadline(600000);  // here eviction alone bounds them
  limits.max_pending = 8;
  limits.max_pending_per_address = 4;
  TlsGate gate("127.0.0.1", 0, "test gate", certs.files("learner"), limits, admitted.handler());
  CHECK(gate.encrypted());
  constexpr int kFlood = 300;
  std::vector<int> flood;
  for (int i = 0; i < kFlood; ++i) flood.push_back(connect_idle(gate.port()));

  // A node on the same address: it arrives after all of them (accepted in
  // order), pushes out the oldest of the four still pending, and is handed on.
  const int node_fd = connect_idle(gate.port());
  sao::net::TlsContext node_tls(certs.files("node-1"), /*server=*/false, "node");
  {
    sao::net::Link node(node_fd);
    std::string problem;
    REQUIRE_MESSAGE(node.start_tls(node_tls, &problem), problem);
    admitted.await(1);
    // The admitted session carries bytes both ways.
    auto& served = *admitted.connections.front();
    CHECK(served.peer() == "127.0.0.1");
    REQUIRE(node.send_all("ping", 4, &problem));
    char got[4] = {0};
    REQUIRE(served.link().receive_all(got, 4, &problem));
    CHECK(std::string(got, 4) == "ping");
  }
  ::close(node_fd);

  // The 297 oldest idle connections were closed to make room (each arrival
  // past the fourth pushed one out); the last three are still pending.
  for (int i = 0; i < kFlood - 3; ++i) CHECK(closed_by_gate(flood[static_cast<size_t>(i)]));
  gate.stop();  // and stopping closes those three
  for (int i = kFlood - 3; i < kFlood; ++i) CHECK(closed_by_gate(flood[static_cast<size_t>(i)]));
  const auto stats = gate.stats();
  CHECK(stats.accepted == kFlood + 1);
  CHECK(stats.evicted == kFlood + 1 - 4);
  CHECK(stats.admitted == 1);
  CHECK(stats.timed_out == 0);
  CHECK(stats.failed_handshake == 0);
  CHECK(stats.pending == 0);
  CHECK(stats.open_admitted == 1);  // held by the test until here
  admitted.connections.clear();
  CHECK(gate.stats().open_admitted == 0);
}

TEST_CASE("gate: silence past the deadline, a non-TLS peer and the descriptor reserve each close the connection") {
  Certificates certs;
  Admitted admitted;
  TlsGate gate("127.0.0.1", 0, "test gate", certs.files("learner"), limits_with_deadline(50), admitted.handler());
  CHECK(closed_by_gate(connect_idle(gate.port())));
  CHECK(gate.stats().timed_out == 1);

  // A BASP header, not a ClientHello: the handshake fails on its first bytes
  // (a gate of its own, so that no deadline can come first).
  TlsGate strict("127.0.0.1", 0, "test gate", certs.files("learner"), limits_with_deadline(600000), admitted.handler());
  const int stranger = connect_idle(strict.port());
  std::string header(32, '\0');
  header[15] = 1;  // operation 0, payload 0, operation data 1: crashed CAF 0.17.6 in plaintext
  std::string problem;
  REQUIRE(sao::base::send_all(stranger, header.data(), header.size(), &problem));
  CHECK(closed_by_gate(stranger));
  CHECK(strict.stats().failed_handshake == 1);
  CHECK(strict.stats().admitted == 0);

  // A reserve larger than the whole limit: every connection is closed on arrival.
  GateLimits reserve_all;
  reserve_all.descriptor_reserve = 1 << 30;
  TlsGate full("127.0.0.1", 0, "full gate", certs.files("learner"), reserve_all, admitted.handler());
  CHECK(closed_by_gate(connect_idle(full.port())));
  CHECK(full.stats().refused_reserve == 1);
  CHECK(full.stats().pending == 0);
}

TEST_CASE("gate: limits that are not positive and missing certificates are refused by name") {
  GateLimits zero;
  zero.max_pending = 0;
  CHECK_THROWS_WITH(TlsGate("127.0.0.1", 0, "bulk server", {}, zero, [](std::unique_ptr<AdmittedConnection>) {}),
                    "bulk server: gate limits must be >= 1 (descriptor reserve >= 0)");
  CHECK_THROWS_WITH(sao::net::TlsRelay("127.0.0.1", 0, "learner node", {}, 1),
                    "learner node: the relay needs the cluster's certificates");
}

TEST_CASE("the descriptor limit is raised to the hard limit") {
  rlimit limit{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &limit) == 0);
  const auto hard = limit.rlim_max;
  limit.rlim_cur = std::min<rlim_t>(hard, 256);
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &limit) == 0);
  CHECK(sao::net::raise_descriptor_limit() == (hard == RLIM_INFINITY ? 0 : hard));
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &limit) == 0);
  CHECK(limit.rlim_cur == hard);
}

TEST_CASE("relay: an authenticated connection is carried both ways to the TLS listener behind it, byte for byte") {
  Certificates certs;
  // The listener behind the relay (CAF's, in a learner) here echoes what it reads.
  sao::net::ConnectionThreads echo_threads;
  const auto limits = limits_with_deadline(10000);
  TlsGate upstream("127.0.0.1", 0, "echo", certs.files("learner"), limits,
                   [&](std::unique_ptr<AdmittedConnection> connection) {
                     echo_threads.spawn(std::move(connection), [](AdmittedConnection& admitted) {
                       std::string problem;
                       char buffer[4096];
                       while (admitted.link().receive_all(buffer, sizeof(buffer), &problem)) {
                         if (!admitted.link().send_all(buffer, sizeof(buffer), &problem)) return;
                       }
                     });
                   });
  sao::net::TlsRelay relay("127.0.0.1", 0, "learner node", certs.files("learner"), upstream.port(), limits);
  const int fd = connect_idle(relay.port());
  sao::net::TlsContext node_tls(certs.files("node-1"), /*server=*/false, "node");
  sao::net::Link node(fd);
  std::string problem;
  REQUIRE_MESSAGE(node.start_tls(node_tls, &problem), problem);
  // 4 MiB each way, more than any socket or TLS buffer holds: the writer
  // runs ahead of the reader, and partial writes are carried on.
  std::vector<char> sent(4 << 20);
  for (size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<char>(i * 131 + i / 4096);
  std::thread writer([&] {
    std::string write_problem;
    CHECK(node.send_all(sent.data(), sent.size(), &write_problem));
  });
  std::vector<char> echoed(sent.size());
  CHECK(node.receive_all(echoed.data(), echoed.size(), &problem));
  writer.join();
  CHECK(echoed == sent);
  CHECK(relay.stats().admitted == 1);
  CHECK(upstream.stats().admitted == 1);
  // Stopping the relay ends the carried connection: the node reads the end.
  relay.stop();
  char byte = 0;
  CHECK_FALSE(node.receive_all(&byte, 1, &problem));
  ::close(fd);
  echo_threads.stop();
}
