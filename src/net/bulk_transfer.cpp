// Bulk byte channel; see bulk_transfer.hpp.
#include "net/bulk_transfer.hpp"

#include "base/allocator.hpp"
#include "base/constant_time.hpp"
#include "base/error.hpp"
#include "base/tcp_socket.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace sao::net {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the bulk wire format is written in host order");

namespace {

constexpr size_t kRequestHeader = 8 + 8 + 8 + 4;
constexpr size_t kResponseHeader = 8 + 4 + 4 + 8 + 8;
constexpr uint32_t kMaxText = 1024;
// Socket buffers for bulk connections: a 400 MB version then moves in fewer,
// larger kernel copies with fewer wake-ups on each side.
constexpr int kSocketBufferBytes = 8 << 20;

// Also no Nagle: a reply is a small header write followed by the body, and
// a small write held for the peer's delayed ACK cost 40 ms per version.
void enlarge_buffers(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &kSocketBufferBytes, sizeof(kSocketBufferBytes));
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &kSocketBufferBytes, sizeof(kSocketBufferBytes));
}

// A connection that sends nothing for this long is closed; a client keeps
// its connection between versions, so this is generous.
constexpr int64_t kServerIdleMs = 10 * 60 * 1000;

template <class T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(value));
}
template <class T>
T take(const char* in) {
  T value;
  std::memcpy(&value, in, sizeof(value));
  return value;
}

std::string response_header(BulkStatus status, int64_t version, uint64_t bytes, const std::string& text) {
  std::string out(kBulkMagic, sizeof(kBulkMagic));
  put<uint32_t>(out, static_cast<uint32_t>(status));
  put<uint32_t>(out, static_cast<uint32_t>(text.size()));
  put<int64_t>(out, version);
  put<uint64_t>(out, bytes);
  out += text;
  return out;
}

const char* status_name(uint32_t status) {
  switch (static_cast<BulkStatus>(status)) {
    case BulkStatus::kOk:
      return "ok";
    case BulkStatus::kNotHeld:
      return "not held";
    case BulkStatus::kRefused:
      return "refused";
    case BulkStatus::kSizeMismatch:
      return "size mismatch";
    case BulkStatus::kBadRequest:
      return "bad request";
  }
  return "unknown status";
}

}  // namespace

BulkServer::BulkServer(const std::string& host, uint16_t port, std::string secret, size_t versions_kept,
                       const TlsFiles& tls, const GateLimits& limits)
    : secret_(std::move(secret)), versions_kept_(versions_kept < 1 ? 1 : versions_kept) {
  if (secret_.empty()) throw Error("bulk server: a secret is required");
  gate_ = std::make_unique<TlsGate>(
      host, port, "bulk server", tls, limits, [this](std::unique_ptr<AdmittedConnection> connection) {
        threads_.spawn(std::move(connection), [this](AdmittedConnection& admitted) { serve(admitted); });
      });
}

BulkServer::~BulkServer() {
  gate_->stop();  // first: no new connection reaches the threads
  threads_.stop();
}

void BulkServer::publish(int64_t version, const char* data, uint64_t size, std::shared_ptr<const void> owner) {
  std::lock_guard<std::mutex> lock(mutex_);
  published_[version] = Published{data, size, std::move(owner)};
  while (published_.size() > versions_kept_) published_.erase(published_.begin());
}

bool BulkServer::holds(int64_t version) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return published_.count(version) > 0;
}

BulkServerStats BulkServer::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void BulkServer::count(BulkStatus status, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (status == BulkStatus::kOk) {
    ++stats_.served;
    stats_.bytes_sent += bytes;
  } else if (status == BulkStatus::kNotHeld) {
    ++stats_.not_held;
  } else {
    ++stats_.refused;
  }
}

void BulkServer::serve(AdmittedConnection& connection) {
  base::set_blocking_with_timeouts(connection.fd(), kServerIdleMs);
  enlarge_buffers(connection.fd());
  std::string problem;
  Link& link = connection.link();
  for (;;) {
    char header[kRequestHeader];
    if (!link.receive_all(header, sizeof(header), &problem)) return;  // the client is done (or gone)
    const auto refuse = [&](BulkStatus status, const std::string& text) {
      const auto reply = response_header(status, 0, 0, text);
      link.send_all(reply.data(), reply.size(), &problem);
      count(status, 0);
    };
    if (std::memcmp(header, kBulkMagic, sizeof(kBulkMagic)) != 0) {
      refuse(BulkStatus::kBadRequest, "not a sao bulk request (bad magic)");
      return;
    }
    const auto version = take<int64_t>(header + 8);
    const auto expected = take<uint64_t>(header + 16);
    const auto secret_length = take<uint32_t>(header + 24);
    if (secret_length > kBulkMaxSecret) {
      refuse(BulkStatus::kBadRequest,
             "secret of " + std::to_string(secret_length) + " bytes (at most " + std::to_string(kBulkMaxSecret) + ")");
      return;
    }
    std::string secret(secret_length, '\0');
    if (!link.receive_all(secret.data(), secret.size(), &problem)) return;
    if (!base::constant_time_equal(secret, secret_)) {
      refuse(BulkStatus::kRefused, "wrong secret");
      return;
    }
    Published item;
    int64_t newest = -1;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto found = published_.find(version);
      if (found != published_.end()) item = found->second;  // holds the bytes while they are sent
      if (!published_.empty()) newest = published_.rbegin()->first;
    }
    if (!item.owner) {
      const auto reply = response_header(
          BulkStatus::kNotHeld, version, 0,
          "version " + std::to_string(version) + " is not held (newest " + std::to_string(newest) + ")");
      count(BulkStatus::kNotHeld, 0);
      if (!link.send_all(reply.data(), reply.size(), &problem)) return;
      continue;
    }
    if (item.size != expected) {
      refuse(BulkStatus::kSizeMismatch, "version " + std::to_string(version) + " holds " + std::to_string(item.size) +
                                            " bytes, not " + std::to_string(expected));
      return;
    }
    // Counted when the reply starts: a client may hold every byte before
    // this thread returns from its last send.
    count(BulkStatus::kOk, item.size);
    const auto reply = response_header(BulkStatus::kOk, version, item.size, "");
    if (!link.send_all(reply.data(), reply.size(), &problem)) return;
    if (!link.send_all(item.data, item.size, &problem)) return;
  }
}

BulkClient::BulkClient(std::string host, uint16_t port, std::string secret, int64_t timeout_ms, const TlsFiles& tls)
    : host_(std::move(host)), port_(port), secret_(std::move(secret)), timeout_ms_(timeout_ms) {
  if (tls.enabled()) tls_ = std::make_unique<TlsContext>(tls, /*server=*/false, "bulk client");
}

BulkClient::~BulkClient() {
  disconnect();
}

void BulkClient::disconnect() {
  link_.reset();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string BulkClient::address() const {
  return host_.find(':') != std::string::npos ? "[" + host_ + "]:" + std::to_string(port_)
                                              : host_ + ":" + std::to_string(port_);
}

void BulkClient::fail(const std::string& what) {
  disconnect();
  throw Error("weights from " + address() + ": " + what);
}

BulkStatus BulkClient::fetch(int64_t version, uint64_t size, std::vector<char>& into) {
  std::string request(kBulkMagic, sizeof(kBulkMagic));
  put<int64_t>(request, version);
  put<uint64_t>(request, size);
  put<uint32_t>(request, static_cast<uint32_t>(secret_.size()));
  request += secret_;
  char header[kResponseHeader];
  std::string problem;
  // A kept connection may have been closed by a server that restarted (or
  // timed it out) since the last version: then one fresh connection is
  // tried before giving up.
  for (int attempt = 0;; ++attempt) {
    const bool reused = fd_ >= 0;
    if (fd_ < 0) {
      // A firewalled port drops the SYN: at most 10 s to find out, then
      // the caller falls back to CAF.
      fd_ = base::connect_tcp(host_, port_, std::min<int64_t>(timeout_ms_, 10000), &problem);
      if (fd_ < 0) fail("cannot connect: " + problem);
      base::set_blocking_with_timeouts(fd_, timeout_ms_);
      enlarge_buffers(fd_);
      link_ = std::make_unique<Link>(fd_);
      if (tls_ && !link_->start_tls(*tls_, &problem)) fail("cannot connect: " + problem);
    }
    if (link_->send_all(request.data(), request.size(), &problem) &&
        link_->receive_all(header, sizeof(header), &problem)) {
      break;
    }
    if (!reused || attempt > 0) fail("reply: " + problem);
    disconnect();
  }
  if (std::memcmp(header, kBulkMagic, sizeof(kBulkMagic)) != 0) fail("reply: not a sao bulk reply (bad magic)");
  const auto status = take<uint32_t>(header + 8);
  const auto text_length = take<uint32_t>(header + 12);
  const auto reply_version = take<int64_t>(header + 16);
  const auto reply_bytes = take<uint64_t>(header + 24);
  if (text_length > kMaxText) fail("reply: a text of " + std::to_string(text_length) + " bytes");
  std::string text(text_length, '\0');
  if (!link_->receive_all(text.data(), text.size(), &problem)) fail("reply: " + problem);
  if (status == static_cast<uint32_t>(BulkStatus::kNotHeld)) return BulkStatus::kNotHeld;
  if (status != static_cast<uint32_t>(BulkStatus::kOk)) {
    fail(std::string(status_name(status)) + (text.empty() ? "" : ": " + text));
  }
  if (reply_version != version || reply_bytes != size) {
    fail("reply: version " + std::to_string(reply_version) + " of " + std::to_string(reply_bytes) +
         " bytes, asked for version " + std::to_string(version) + " of " + std::to_string(size));
  }
  if (into.capacity() < size) into = base::make_bulk_buffer(size);
  into.resize(size);
  if (!link_->receive_all(into.data(), size, &problem)) fail("version " + std::to_string(version) + ": " + problem);
  return BulkStatus::kOk;
}

SharedBulkReader::SharedBulkReader(std::string host, std::string secret, int64_t timeout_ms, TlsFiles tls)
    : host_(std::move(host)), secret_(std::move(secret)), timeout_ms_(timeout_ms), tls_(std::move(tls)) {}

std::shared_ptr<const std::vector<char>> SharedBulkReader::read(uint16_t port, int64_t version, uint64_t size) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (bytes_ && version_ == version && port_ == port && bytes_->size() == size) return bytes_;
  if (!client_ || client_->port() != port) {
    client_ = std::make_unique<BulkClient>(host_, port, secret_, timeout_ms_, tls_);
  }
  // The old buffer is reused only when no rollout still holds it (one that
  // has not applied it yet, at a turn boundary, keeps its own reference).
  if (!bytes_ || bytes_.use_count() > 1) bytes_ = std::make_shared<std::vector<char>>();
  version_ = -1;  // until the read completes, the buffer holds no version
  BulkStatus status = BulkStatus::kOk;
  try {
    status = client_->fetch(version, size, *bytes_);
  } catch (const Error&) {
    client_.reset();
    throw;
  }
  if (status != BulkStatus::kOk) return nullptr;
  version_ = version;
  port_ = port;
  ++downloads_;
  return bytes_;
}

int64_t SharedBulkReader::downloads() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return downloads_;
}

}  // namespace sao::net
