// Bulk bytes beside the actor messages. A learner serves each weight
// version's packed buffer from a plain TCP socket, and a rollout in another
// process reads it straight into a buffer it keeps: one kernel copy on each
// side and none in user space. Through CAF's middleman the same bytes were
// copied into a serialisation buffer, into a fresh payload buffer on
// arrival and out of it again, each a fresh mapping the kernel zeroes page
// by page (docs/decisions.md, "Weights travel beside CAF"). The actor
// messages still say which version to take and when; only the bytes move
// here.
//
// Wire format, integers little-endian; a connection carries any number of
// request/response pairs:
//   request:  "SAOBULK1" u64 version, u64 bytes expected, u32 secret length, secret
//   response: "SAOBULK1" u32 status, u32 text length, u64 version, u64 bytes, text,
//             then the bytes when the status is kOk
// A request with a wrong secret, a bad magic or a secret over 4 KiB is
// answered with its status and the connection is closed.
//
// With certificates (TlsFiles, the cluster's) every connection is TLS with
// both sides authenticated before a byte of a request is read; a peer
// without a certificate signed by the cluster's CA gets nothing.
#pragma once

#include "net/tls_gate.hpp"
#include "net/tls_link.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace sao::net {

inline constexpr char kBulkMagic[8] = {'S', 'A', 'O', 'B', 'U', 'L', 'K', '1'};
inline constexpr uint32_t kBulkMaxSecret = 4096;

enum class BulkStatus : uint32_t {
  kOk = 0,
  kNotHeld = 1,       // the version asked for was replaced by newer ones
  kRefused = 2,       // wrong secret
  kSizeMismatch = 3,  // the version holds another number of bytes than asked
  kBadRequest = 4,    // not a request of this protocol
};

struct BulkServerStats {
  int64_t served = 0;  // versions whose bytes the server started to send
  int64_t not_held = 0;
  int64_t refused = 0;      // wrong secret, bad request, size mismatch (the gate counts what it refuses)
  uint64_t bytes_sent = 0;  // of those versions
};

// Serves published byte buffers by version to clients that present the
// secret. Threads: the gate's (accepts, bounds and authenticates
// connections; net/tls_gate.hpp), one per admitted connection.
class BulkServer {
 public:
  // Listens on host:port (0: any free port). Throws sao::Error naming the
  // address when it cannot. `versions_kept`: how many of the newest
  // versions stay available (a client asked for version v while v+1 was
  // published still gets v).
  // With `tls` enabled, every connection must complete a mutually
  // authenticated TLS handshake first (a certificate file that cannot be
  // loaded is an error here, naming it).
  BulkServer(const std::string& host, uint16_t port, std::string secret, size_t versions_kept = 2,
             const TlsFiles& tls = {}, const GateLimits& limits = {});
  ~BulkServer();  // closes every connection and joins every thread
  BulkServer(const BulkServer&) = delete;
  BulkServer& operator=(const BulkServer&) = delete;

  uint16_t port() const { return gate_->port(); }
  bool encrypted() const { return gate_->encrypted(); }
  GateStats gate_stats() const { return gate_->stats(); }
  // Serves `size` bytes at `data` as `version` until `versions_kept` newer
  // versions are published. `owner` keeps the bytes alive; it is released
  // when the version is dropped and no connection is still sending it.
  void publish(int64_t version, const char* data, uint64_t size, std::shared_ptr<const void> owner);
  bool holds(int64_t version) const;
  BulkServerStats stats() const;

 private:
  struct Published {
    const char* data = nullptr;
    uint64_t size = 0;
    std::shared_ptr<const void> owner;
  };
  void serve(AdmittedConnection& connection);
  void count(BulkStatus status, uint64_t bytes);

  std::string secret_;
  size_t versions_kept_;
  mutable std::mutex mutex_;
  std::map<int64_t, Published> published_;
  BulkServerStats stats_;
  ConnectionThreads threads_;
  std::unique_ptr<TlsGate> gate_;  // last: it hands connections to the members above
};

// What a fetch gave: kOk (the bytes are in the buffer) or kNotHeld (the
// server has moved on to newer versions; ask again for the newest).
// Every other outcome throws.
class BulkClient {
 public:
  // Connects on the first fetch. `timeout_ms` bounds connecting and every
  // wait for the server, so a server that stops answering is an error, not
  // a hang.
  // With `tls` enabled the connection is TLS, and the server must show a
  // certificate signed by tls.ca_file.
  BulkClient(std::string host, uint16_t port, std::string secret, int64_t timeout_ms, const TlsFiles& tls = {});
  ~BulkClient();
  BulkClient(const BulkClient&) = delete;
  BulkClient& operator=(const BulkClient&) = delete;

  // Reads `version`, exactly `size` bytes, into `into` (resized to `size`;
  // its storage is reused from call to call, so a steady stream of
  // versions allocates once). Throws sao::Error naming the server and what
  // went wrong (unreachable, refused, timed out, cut short, a malformed
  // reply); the connection is closed then and opened anew by the next call.
  BulkStatus fetch(int64_t version, uint64_t size, std::vector<char>& into);
  std::string address() const;  // host:port, for messages
  uint16_t port() const { return port_; }

 private:
  [[noreturn]] void fail(const std::string& what);
  void disconnect();
  std::string host_;
  uint16_t port_;
  std::string secret_;
  int64_t timeout_ms_;
  std::unique_ptr<TlsContext> tls_;
  int fd_ = -1;
  std::unique_ptr<Link> link_;
};

// The newest version's bytes as read by any rollout of this process: the
// rollouts of one node share one reader, so the node downloads each version
// once however many rollouts it runs (the learner's upload is divided by
// that number), over one connection.
class SharedBulkReader {
 public:
  SharedBulkReader(std::string host, std::string secret, int64_t timeout_ms, TlsFiles tls = {});

  // The bytes of `version` (`size` of them) from the bulk server on `port`:
  // the ones this process already read, or read now. Null when the server
  // no longer holds that version. Throws sao::Error as BulkClient::fetch.
  // A buffer handed out is never written again; the next version goes to a
  // fresh one unless nobody holds the old one any more.
  std::shared_ptr<const std::vector<char>> read(uint16_t port, int64_t version, uint64_t size);
  // Versions read from the server (not served from this process's copy).
  int64_t downloads() const;

 private:
  std::string host_;
  std::string secret_;
  int64_t timeout_ms_;
  TlsFiles tls_;
  mutable std::mutex mutex_;
  std::unique_ptr<BulkClient> client_;
  int64_t version_ = -1;
  uint16_t port_ = 0;
  std::shared_ptr<std::vector<char>> bytes_;
  int64_t downloads_ = 0;
};

}  // namespace sao::net
