// The bulk channel that carries weights beside CAF (net/bulk_transfer.hpp):
// bytes arrive exactly and in a reused buffer, replaced versions are
// answered "not held", and every bad request, wrong secret, cut connection
// and silent server is a named error, never a hang, after which the server
// still serves and the client connects again. Over TLS only the cluster's
// certificates get through.
#include "base/tcp_socket.hpp"
#include "net/bulk_transfer.hpp"

#include <doctest/doctest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using sao::net::BulkClient;
using sao::net::BulkServer;
using sao::net::BulkStatus;

constexpr int64_t kTimeoutMs = 20000;  // a cap against a hang; every wait below ends on an event first

std::shared_ptr<std::vector<char>> pattern(size_t size, char seed) {
  auto bytes = std::make_shared<std::vector<char>>(size);
  for (size_t i = 0; i < size; ++i) (*bytes)[i] = static_cast<char>(seed + static_cast<char>(i * 7));
  return bytes;
}

void publish(BulkServer& server, int64_t version, const std::shared_ptr<std::vector<char>>& bytes) {
  server.publish(version, bytes->data(), bytes->size(), bytes);
}

std::string error_of(BulkClient& client, int64_t version, uint64_t size) {
  std::vector<char> into;
  try {
    client.fetch(version, size, into);
  } catch (const std::exception& error) {
    return error.what();
  }
  return "no error";
}

// A raw connection to the server: what a stranger or a broken peer sends.
std::string raw_exchange(uint16_t port, const std::string& request) {
  std::string problem;
  const int fd = sao::base::connect_tcp("127.0.0.1", port, kTimeoutMs, &problem);
  REQUIRE_MESSAGE(fd >= 0, problem);
  sao::base::set_blocking_with_timeouts(fd, kTimeoutMs);
  REQUIRE(sao::base::send_all(fd, request.data(), request.size(), &problem));
  ::shutdown(fd, SHUT_WR);  // all it has to say
  std::string reply;
  char buffer[4096];
  for (;;) {  // until the server closes the connection
    const auto got = ::recv(fd, buffer, sizeof(buffer), 0);
    if (got <= 0) break;
    reply.append(buffer, static_cast<size_t>(got));
  }
  ::close(fd);
  return reply;
}

template <class T>
std::string bytes_of(T value) {
  return std::string(reinterpret_cast<const char*>(&value), sizeof(value));
}

uint32_t reply_status(const std::string& reply) {
  REQUIRE(reply.size() >= 32);
  CHECK(reply.compare(0, 8, "SAOBULK1") == 0);
  uint32_t status = 0;
  std::memcpy(&status, reply.data() + 8, sizeof(status));
  return status;
}

}  // namespace

TEST_CASE("bulk: versions arrive byte for byte over one kept connection, into a reused buffer") {
  BulkServer server("127.0.0.1", 0, "s3cret");
  REQUIRE(server.port() > 0);
  const auto first = pattern(3 << 20, 1);
  const auto second = pattern(3 << 20, 2);
  publish(server, 7, first);
  BulkClient client("127.0.0.1", server.port(), "s3cret", kTimeoutMs);
  std::vector<char> into;
  REQUIRE(client.fetch(7, first->size(), into) == BulkStatus::kOk);
  CHECK(into == *first);
  const char* storage = into.data();
  publish(server, 8, second);
  REQUIRE(client.fetch(8, second->size(), into) == BulkStatus::kOk);
  CHECK(into == *second);
  CHECK(into.data() == storage);  // no new buffer for a version of the same size
  const auto stats = server.stats();
  CHECK(stats.served == 2);
  CHECK(stats.bytes_sent == first->size() + second->size());
  CHECK(stats.refused == 0);
}

TEST_CASE("bulk: a replaced version is 'not held', the connection stays usable, and its bytes are released") {
  BulkServer server("127.0.0.1", 0, "s3cret", /*versions_kept=*/2);
  const auto v1 = pattern(1000, 1);
  publish(server, 1, v1);
  publish(server, 2, pattern(1000, 2));
  CHECK(server.holds(1));
  publish(server, 3, pattern(1000, 3));
  CHECK_FALSE(server.holds(1));
  CHECK(server.holds(2));
  CHECK(v1.use_count() == 1);  // the server let go of the replaced version's owner
  BulkClient client("127.0.0.1", server.port(), "s3cret", kTimeoutMs);
  std::vector<char> into;
  CHECK(client.fetch(1, 1000, into) == BulkStatus::kNotHeld);
  REQUIRE(client.fetch(3, 1000, into) == BulkStatus::kOk);
  CHECK(into == *pattern(1000, 3));
  CHECK(server.stats().not_held == 1);
}

TEST_CASE("bulk: a wrong secret and a wrong size are refused with their reasons; the server still serves") {
  BulkServer server("127.0.0.1", 0, "s3cret");
  publish(server, 1, pattern(10, 1));
  const std::string address = "weights from 127.0.0.1:" + std::to_string(server.port()) + ": ";
  BulkClient stranger("127.0.0.1", server.port(), "guess", kTimeoutMs);
  CHECK(error_of(stranger, 1, 10) == address + "refused: wrong secret");
  BulkClient client("127.0.0.1", server.port(), "s3cret", kTimeoutMs);
  CHECK(error_of(client, 1, 11) == address + "size mismatch: version 1 holds 10 bytes, not 11");
  std::vector<char> into;
  REQUIRE(client.fetch(1, 10, into) == BulkStatus::kOk);  // connected again after the refusal closed it
  CHECK(into == *pattern(10, 1));
  CHECK(server.stats().refused == 2);
}

TEST_CASE("bulk: requests of another protocol and oversized secrets get 'bad request' and a closed connection") {
  BulkServer server("127.0.0.1", 0, "s3cret");
  publish(server, 1, pattern(10, 1));
  const auto http = raw_exchange(server.port(), "GET /weights HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  CHECK(reply_status(http) == static_cast<uint32_t>(BulkStatus::kBadRequest));
  CHECK(http.find("not a sao bulk request (bad magic)") != std::string::npos);
  // A secret length of 1 GiB: refused from the header, nothing allocated.
  const auto huge = raw_exchange(server.port(), std::string("SAOBULK1") + bytes_of<int64_t>(1) +
                                                    bytes_of<uint64_t>(10) + bytes_of<uint32_t>(1u << 30));
  CHECK(reply_status(huge) == static_cast<uint32_t>(BulkStatus::kBadRequest));
  CHECK(huge.find("secret of 1073741824 bytes (at most 4096)") != std::string::npos);
  // A header cut short by a peer that hangs up: the server just closes.
  CHECK(raw_exchange(server.port(), "SAOBULK1\x01").empty());
  BulkClient client("127.0.0.1", server.port(), "s3cret", kTimeoutMs);
  std::vector<char> into;
  CHECK(client.fetch(1, 10, into) == BulkStatus::kOk);
}

TEST_CASE("bulk: no server, a server that dies mid-transfer, and a silent one are errors, not hangs") {
  uint16_t port = 0;
  {
    BulkServer gone("127.0.0.1", 0, "s3cret");
    port = gone.port();
  }
  BulkClient nobody("127.0.0.1", port, "s3cret", kTimeoutMs);
  CHECK(error_of(nobody, 1, 10) ==
        "weights from 127.0.0.1:" + std::to_string(port) + ": cannot connect: Connection refused");

  // A fake server that promises 1000 bytes, sends 100 and closes.
  uint16_t fake_port = 0;
  const int listener = sao::base::listen_tcp("127.0.0.1", 0, "fake", &fake_port);
  std::thread fake([listener] {
    const int fd = ::accept(listener, nullptr, nullptr);
    char request[64];
    [[maybe_unused]] auto got = ::recv(fd, request, sizeof(request), 0);
    std::string reply = std::string("SAOBULK1") + bytes_of<uint32_t>(0) + bytes_of<uint32_t>(0) + bytes_of<int64_t>(5) +
                        bytes_of<uint64_t>(1000) + std::string(100, 'x');
    std::string problem;
    sao::base::send_all(fd, reply.data(), reply.size(), &problem);
    ::close(fd);
    // The second connection never answers: the client's timeout ends it.
    const int silent = ::accept(listener, nullptr, nullptr);
    char sink[64];
    while (::recv(silent, sink, sizeof(sink), 0) > 0) {
    }
    ::close(silent);
  });
  BulkClient client("127.0.0.1", fake_port, "s3cret", kTimeoutMs);
  CHECK(error_of(client, 5, 1000) == "weights from 127.0.0.1:" + std::to_string(fake_port) +
                                         ": version 5: the peer closed the connection after 100 of 1000 bytes");
  BulkClient impatient("127.0.0.1", fake_port, "s3cret", /*timeout_ms=*/300);
  CHECK(error_of(impatient, 5, 1000) == "weights from 127.0.0.1:" + std::to_string(fake_port) +
                                            ": reply: receive failed after 0 of 32 bytes: timed out");
  ::shutdown(listener, SHUT_RDWR);
  fake.join();
  ::close(listener);
}

TEST_CASE("bulk: a client reconnects by itself when the server restarted on the same port") {
  auto server = std::make_unique<BulkServer>("127.0.0.1", 0, "s3cret");
  const uint16_t port = server->port();
  publish(*server, 1, pattern(64, 1));
  BulkClient client("127.0.0.1", port, "s3cret", kTimeoutMs);
  std::vector<char> into;
  REQUIRE(client.fetch(1, 64, into) == BulkStatus::kOk);
  server.reset();  // closes the client's kept connection
  server = std::make_unique<BulkServer>("127.0.0.1", port, "s3cret");
  publish(*server, 2, pattern(64, 2));
  REQUIRE(client.fetch(2, 64, into) == BulkStatus::kOk);
  CHECK(into == *pattern(64, 2));
}

TEST_CASE("bulk: a server needs a secret and an address it can listen on") {
  CHECK_THROWS_WITH(BulkServer("127.0.0.1", 0, ""), "bulk server: a secret is required");
  BulkServer first("127.0.0.1", 0, "s3cret");
  CHECK_THROWS_WITH(
      BulkServer("127.0.0.1", first.port(), "s3cret"),
      ("bulk server: cannot listen on 127.0.0.1:" + std::to_string(first.port()) + ": Address already in use").c_str());
}

TEST_CASE("bulk over TLS: the cluster's certificates carry the bytes; another CA and plaintext get nothing") {
  const auto dir = std::filesystem::temp_directory_path() / ("sao_bulk_tls_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const std::string certs_script = std::string(SAO_SOURCE_DIR) + "/deploy/cluster-certs";
  REQUIRE(std::system((certs_script + " '" + (dir / "certs").string() + "' learner node-1 > /dev/null").c_str()) == 0);
  REQUIRE(std::system((certs_script + " '" + (dir / "rogue").string() + "' node-1 > /dev/null").c_str()) == 0);
  const auto files = [&](const std::string& node_dir) {
    const auto base = dir / node_dir;
    return sao::net::TlsFiles{(base / "ca.crt").string(), (base / "node.crt").string(), (base / "node.key").string()};
  };

  BulkServer server("127.0.0.1", 0, "s3cret", 2, files("certs/learner"));
  CHECK(server.encrypted());
  const auto bytes = pattern(5 << 20, 3);
  publish(server, 1, bytes);
  const std::string address = "weights from 127.0.0.1:" + std::to_string(server.port()) + ": ";

  BulkClient node("127.0.0.1", server.port(), "s3cret", kTimeoutMs, files("certs/node-1"));
  std::vector<char> into;
  REQUIRE(node.fetch(1, bytes->size(), into) == BulkStatus::kOk);
  CHECK(into == *bytes);
  REQUIRE(node.fetch(1, bytes->size(), into) == BulkStatus::kOk);  // the kept TLS session again

  // A node of another cluster cannot verify this learner's certificate.
  BulkClient rogue("127.0.0.1", server.port(), "s3cret", kTimeoutMs, files("rogue/node-1"));
  const auto rogue_error = error_of(rogue, 1, bytes->size());
  CHECK_MESSAGE(rogue_error.rfind(address + "cannot connect: TLS handshake failed: ", 0) == 0, rogue_error);
  CHECK_MESSAGE(rogue_error.find("certificate verify failed") != std::string::npos, rogue_error);
  // A plaintext request is not a TLS handshake: the server hangs up (a close
  // or a reset, as the timing falls) before any reply header.
  BulkClient plain("127.0.0.1", server.port(), "s3cret", kTimeoutMs);
  const auto plain_error = error_of(plain, 1, bytes->size());
  CHECK_MESSAGE(plain_error.rfind(address + "reply: ", 0) == 0, plain_error);
  CHECK_MESSAGE(plain_error.find(" of 32 bytes") != std::string::npos, plain_error);
  // Both were stopped at the gate (net/tls_gate.hpp): no request was read.
  CHECK(server.gate_stats().failed_handshake == 2);
  CHECK(server.stats().refused == 0);
  CHECK(server.stats().served == 2);

  // A TLS client to a plaintext server fails its handshake, and says so.
  BulkServer plain_server("127.0.0.1", 0, "s3cret");
  publish(plain_server, 1, bytes);
  BulkClient encrypted("127.0.0.1", plain_server.port(), "s3cret", kTimeoutMs, files("certs/node-1"));
  const auto mismatch = error_of(encrypted, 1, bytes->size());
  CHECK_MESSAGE(mismatch.find("cannot connect: TLS handshake failed") != std::string::npos, mismatch);

  // Certificate files that are not there are named.
  CHECK_THROWS_WITH(BulkServer("127.0.0.1", 0, "s3cret", 2, files("missing")),
                    doctest::Contains(("bulk server: cannot load " + (dir / "missing" / "node.crt").string()).c_str()));
  std::filesystem::remove_all(dir);
}

TEST_CASE("bulk over TLS: 600 idle connections held open do not lock a node out") {
  const auto dir = std::filesystem::temp_directory_path() / ("sao_bulk_flood_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const std::string certs_script = std::string(SAO_SOURCE_DIR) + "/deploy/cluster-certs";
  REQUIRE(std::system((certs_script + " '" + dir.string() + "' learner node-1 > /dev/null").c_str()) == 0);
  const auto files = [&](const std::string& node) {
    return sao::net::TlsFiles{(dir / node / "ca.crt").string(), (dir / node / "node.crt").string(),
                              (dir / node / "node.key").string()};
  };
  BulkServer server("127.0.0.1", 0, "s3cret", 2, files("learner"));
  publish(server, 1, pattern(4096, 1));
  // More than the server once had connection threads (256), each of which
  // an idle stranger held for its 10-minute idle timeout.
  std::vector<int> idle;
  for (int i = 0; i < 600; ++i) {
    std::string problem;
    idle.push_back(sao::base::connect_tcp("127.0.0.1", server.port(), kTimeoutMs, &problem));
    REQUIRE_MESSAGE(idle.back() >= 0, problem);
  }
  BulkClient node("127.0.0.1", server.port(), "s3cret", kTimeoutMs, files("node-1"));
  std::vector<char> into;
  CHECK(node.fetch(1, 4096, into) == BulkStatus::kOk);
  CHECK(into == *pattern(4096, 1));
  const auto gate = server.gate_stats();
  CHECK(gate.accepted == 601);
  CHECK(gate.admitted == 1);
  CHECK(gate.evicted == 601 - sao::net::GateLimits{}.max_pending_per_address);
  for (int fd : idle) ::close(fd);
  std::filesystem::remove_all(dir);
}

TEST_CASE("bulk: a node's rollouts share one read per version, and a buffer still held is never overwritten") {
  BulkServer server("127.0.0.1", 0, "s3cret");
  sao::net::SharedBulkReader reader("127.0.0.1", "s3cret", kTimeoutMs);
  publish(server, 1, pattern(4096, 1));
  auto first = reader.read(server.port(), 1, 4096);
  const auto again = reader.read(server.port(), 1, 4096);  // another rollout, the same version
  REQUIRE(first);
  CHECK(again == first);
  CHECK(reader.downloads() == 1);
  CHECK(server.stats().served == 1);
  // Version 2 while version 1 is still held (a rollout waiting for a turn
  // boundary): a fresh buffer, the held one unchanged.
  publish(server, 2, pattern(4096, 2));
  auto second = reader.read(server.port(), 2, 4096);
  REQUIRE(second);
  CHECK(second != first);
  CHECK(*first == *pattern(4096, 1));
  CHECK(*second == *pattern(4096, 2));
  // Once no rollout holds version 2's buffer, version 3 is read into it.
  const auto* storage = second.get();
  second.reset();
  publish(server, 3, pattern(4096, 3));
  const auto third = reader.read(server.port(), 3, 4096);
  REQUIRE(third);
  CHECK(third.get() == storage);
  CHECK(*third == *pattern(4096, 3));
  CHECK(*first == *pattern(4096, 1));
  CHECK(reader.downloads() == 3);
  // A version the server no longer holds: null, and nothing counted.
  CHECK(reader.read(server.port(), 1, 4096) == nullptr);
  CHECK(reader.downloads() == 3);
}
