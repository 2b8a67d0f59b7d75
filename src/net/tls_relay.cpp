// Carrying authenticated connections to a loopback TLS listener; see tls_relay.hpp.
#include "net/tls_relay.hpp"

#include "base/error.hpp"
#include "base/tcp_socket.hpp"

#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <vector>

namespace sao::net {

namespace {

// One direction of a relayed connection: bytes read from one session wait
// here until the other session has taken them.
struct RelayDirection {
  ssl_st* from;
  ssl_st* to;
  std::vector<char> buffer = std::vector<char>(64 * 1024);
  size_t begin = 0;
  size_t end = 0;
  short from_events = 0;  // what `from` waits for, when it waits
  short to_events = 0;
};

short wanted_events(ssl_st* session, int result, bool* ended) {
  const int kind = SSL_get_error(session, result);
  if (kind == SSL_ERROR_WANT_READ) return POLLIN;
  if (kind == SSL_ERROR_WANT_WRITE) return POLLOUT;
  *ended = true;  // closed by the peer, or an error: the relayed connection ends
  return 0;
}

// Moves what it can without blocking; false once the stream has ended.
bool pump_direction(RelayDirection& direction, bool* progress) {
  direction.from_events = 0;
  direction.to_events = 0;
  bool ended = false;
  if (direction.begin == direction.end) {
    direction.begin = direction.end = 0;
    ERR_clear_error();
    const int got = SSL_read(direction.from, direction.buffer.data(), static_cast<int>(direction.buffer.size()));
    if (got > 0) {
      direction.end = static_cast<size_t>(got);
      *progress = true;
    } else {
      direction.from_events = wanted_events(direction.from, got, &ended);
    }
  }
  if (!ended && direction.begin < direction.end) {
    ERR_clear_error();
    const int wrote = SSL_write(direction.to, direction.buffer.data() + direction.begin,
                                static_cast<int>(direction.end - direction.begin));
    if (wrote > 0) {
      direction.begin += static_cast<size_t>(wrote);
      *progress = true;
    } else {
      direction.to_events = wanted_events(direction.to, wrote, &ended);
    }
  }
  ERR_clear_error();
  return !ended;
}

}  // namespace

TlsRelay::TlsRelay(const std::string& host, uint16_t port, const std::string& what, const TlsFiles& tls,
                   uint16_t upstream_port, GateLimits limits)
    : what_(what), upstream_port_(upstream_port) {
  if (!tls.enabled()) throw Error(what + ": the relay needs the cluster's certificates");
  upstream_tls_ = std::make_unique<TlsContext>(tls, /*server=*/false, what);
  gate_ = std::make_unique<TlsGate>(host, port, what, tls, limits, [this](std::unique_ptr<AdmittedConnection> client) {
    threads_.spawn(std::move(client), [this](AdmittedConnection& admitted) { relay(admitted); });
  });
}

TlsRelay::~TlsRelay() {
  stop();
}

void TlsRelay::stop() {
  gate_->stop();  // first: no new connection reaches the threads
  threads_.stop();
}

void TlsRelay::relay(AdmittedConnection& client) {
  std::string problem;
  const int upstream = base::connect_tcp("127.0.0.1", upstream_port_, /*timeout_ms=*/10000, &problem);
  if (upstream < 0) {
    std::fprintf(stderr, "%s: cannot reach 127.0.0.1:%u for a node from %s: %s\n", what_.c_str(),
                 static_cast<unsigned>(upstream_port_), client.peer().c_str(), problem.c_str());
    return;
  }
  threads_.watch(upstream);
  ssl_st* upstream_session = SSL_new(upstream_tls_->get());
  ssl_st* client_session = client.link().session();
  if (upstream_session != nullptr) {
    SSL_set_fd(upstream_session, upstream);
    SSL_set_connect_state(upstream_session);  // the handshake runs inside the first read or write
    const long modes = SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER;
    SSL_set_mode(upstream_session, modes);
    SSL_set_mode(client_session, modes);
    ::fcntl(client.fd(), F_SETFL, ::fcntl(client.fd(), F_GETFL, 0) | O_NONBLOCK);
    RelayDirection to_upstream{client_session, upstream_session};
    RelayDirection to_client{upstream_session, client_session};
    for (;;) {
      bool progress = true;
      bool open = true;
      while (progress && open) {
        progress = false;
        open = pump_direction(to_upstream, &progress) && pump_direction(to_client, &progress);
      }
      if (!open) break;
      pollfd items[2] = {{client.fd(), static_cast<short>(to_upstream.from_events | to_client.to_events), 0},
                         {upstream, static_cast<short>(to_client.from_events | to_upstream.to_events), 0}};
      if (::poll(items, 2, -1) < 0 && errno != EINTR) break;
    }
    SSL_free(upstream_session);
  }
  ERR_clear_error();
  threads_.unwatch(upstream);
  ::close(upstream);
}

}  // namespace sao::net
