// The gate in front of every cluster port; see tls_gate.hpp.
#include "net/tls_gate.hpp"

#include "base/error.hpp"
#include "base/tcp_socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

namespace sao::net {

namespace {

int64_t gate_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The gate's and the connection threads' writes may hit a peer that left;
// these threads are sao's own, so SIGPIPE stays blocked on them for good.
void block_sigpipe_on_this_thread() {
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
}

std::string peer_address(const sockaddr_storage& address) {
  char text[INET6_ADDRSTRLEN] = {0};
  if (address.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(address).sin_addr, text, sizeof(text));
  } else if (address.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(address).sin6_addr, text, sizeof(text));
  }
  return text;
}

void set_socket_nonblocking(int fd, bool nonblocking) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, nonblocking ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK));
}

uint64_t current_descriptor_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 0;
  return limit.rlim_cur;
}

}  // namespace

uint64_t raise_descriptor_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
  return current_descriptor_limit();
}

AdmittedConnection::AdmittedConnection(int fd, ssl_st* session, std::string peer,
                                       std::shared_ptr<std::atomic<int64_t>> open_count)
    : fd_(fd), link_(std::make_unique<Link>(fd, session)), peer_(std::move(peer)), open_count_(std::move(open_count)) {}

AdmittedConnection::~AdmittedConnection() {
  link_.reset();  // frees the session; the socket is ours to close
  ::close(fd_);
  if (open_count_) --*open_count_;
}

struct TlsGate::Pending {
  int fd = -1;
  ssl_st* session = nullptr;
  std::string peer;
  int64_t deadline_ms = 0;
  short events = POLLIN;
};

namespace {

void close_pending(int fd, ssl_st* session) {
  if (session != nullptr) SSL_free(session);
  ::close(fd);
}

}  // namespace

TlsGate::TlsGate(const std::string& host, uint16_t port, const std::string& what, const TlsFiles& tls,
                 GateLimits limits, Handler on_admitted)
    : what_(what),
      limits_(limits),
      on_admitted_(std::move(on_admitted)),
      open_admitted_(std::make_shared<std::atomic<int64_t>>(0)) {
  if (limits_.max_pending < 1 || limits_.max_pending_per_address < 1 || limits_.handshake_deadline_ms < 1 ||
      limits_.max_admitted < 1 || limits_.descriptor_reserve < 0) {
    throw Error(what + ": gate limits must be >= 1 (descriptor reserve >= 0)");
  }
  if (tls.enabled()) tls_ = std::make_unique<TlsContext>(tls, /*server=*/true, what);
  listen_fd_ = base::listen_tcp(host, port, what, &port_);
  set_socket_nonblocking(listen_fd_, true);
  // The kernel's queue of connections not yet accepted holds no descriptor
  // of ours; a long one keeps a node's connect from waiting out a SYN
  // retry while a flood is being drained (Linux takes a second listen() as
  // a new backlog).
  ::listen(listen_fd_, SOMAXCONN);
  if (::pipe2(wake_pipe_, O_CLOEXEC) != 0) {
    ::close(listen_fd_);
    throw Error(what + ": cannot create a pipe: " + std::strerror(errno));
  }
  thread_ = std::thread([this] { run(); });
}

TlsGate::~TlsGate() {
  stop();
  ::close(wake_pipe_[0]);
  ::close(wake_pipe_[1]);
}

void TlsGate::stop() {
  if (!thread_.joinable()) return;
  stopping_ = true;
  const char byte = 0;
  [[maybe_unused]] auto wrote = ::write(wake_pipe_[1], &byte, 1);
  thread_.join();
  ::close(listen_fd_);  // connections still in the backlog are reset
  listen_fd_ = -1;
}

// Counted before the socket closes, so a peer that sees the close sees the count.
void TlsGate::count(int64_t GateStats::*counter) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++(stats_.*counter);
}

GateStats TlsGate::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto copy = stats_;
  copy.open_admitted = open_admitted_->load();
  return copy;
}

void TlsGate::run() {
  block_sigpipe_on_this_thread();
  std::vector<Pending> pending;
  int64_t accept_paused_until = 0;
  while (!stopping_) {
    const int64_t now = gate_now_ms();
    std::vector<pollfd> items = {{listen_fd_, static_cast<short>(now >= accept_paused_until ? POLLIN : 0), 0},
                                 {wake_pipe_[0], POLLIN, 0}};
    int64_t wait_ms = now >= accept_paused_until ? -1 : accept_paused_until - now;
    for (const auto& connection : pending) {
      items.push_back({connection.fd, connection.events, 0});
      const int64_t left = std::max<int64_t>(0, connection.deadline_ms - now);
      wait_ms = wait_ms < 0 ? left : std::min(wait_ms, left);
    }
    if (::poll(items.data(), items.size(), static_cast<int>(std::min<int64_t>(wait_ms, 60000))) < 0 && errno != EINTR)
      break;
    if (stopping_) break;
    const int64_t after = gate_now_ms();
    std::vector<Pending> waiting;
    for (size_t i = 0; i < pending.size(); ++i) {
      auto& connection = pending[i];
      if (items[i + 2].revents != 0 && !advance_handshake(connection)) continue;
      if (after >= connection.deadline_ms) {
        count(&GateStats::timed_out);
        close_pending(connection.fd, connection.session);
        continue;
      }
      waiting.push_back(connection);
    }
    pending.swap(waiting);
    // Out of descriptors with nothing of ours to give back: listen again shortly.
    if ((items[0].revents & POLLIN) && !accept_ready(pending)) accept_paused_until = gate_now_ms() + 100;
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.pending = static_cast<int64_t>(pending.size());
  }
  // Shutdown: no handshake in progress survives the gate.
  for (auto& connection : pending) close_pending(connection.fd, connection.session);
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.pending = 0;
}

bool TlsGate::accept_ready(std::vector<Pending>& pending) {
  // At most this many per wake-up, so that handshakes in progress keep moving during a flood.
  for (int round = 0; round < 256; ++round) {
    sockaddr_storage address{};
    socklen_t length = sizeof(address);
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      const bool out_of_descriptors = errno == EMFILE || errno == ENFILE;
      if (out_of_descriptors && !pending.empty()) {
        // The oldest pending connection gives its descriptor to the newest.
        count(&GateStats::evicted);
        close_pending(pending.front().fd, pending.front().session);
        pending.erase(pending.begin());
        continue;
      }
      return !out_of_descriptors;
    }
    count(&GateStats::accepted);
    // Descriptors are handed out lowest first, so all below `fd` are taken:
    // at most limit - fd - 1 are left.
    const uint64_t limit = current_descriptor_limit();
    if (limit > 0 && static_cast<uint64_t>(fd) + 1 + static_cast<uint64_t>(limits_.descriptor_reserve) > limit) {
      count(&GateStats::refused_reserve);
      ::close(fd);
      continue;
    }
    Pending connection{fd, nullptr, peer_address(address), gate_now_ms() + limits_.handshake_deadline_ms, POLLIN};
    if (!tls_) {
      admit(connection);
      continue;
    }
    const auto same_peer = [&](const Pending& other) { return other.peer == connection.peer; };
    const auto from_peer = static_cast<size_t>(std::count_if(pending.begin(), pending.end(), same_peer));
    if (from_peer >= limits_.max_pending_per_address || pending.size() >= limits_.max_pending) {
      auto oldest = from_peer >= limits_.max_pending_per_address
                        ? std::find_if(pending.begin(), pending.end(), same_peer)
                        : pending.begin();
      count(&GateStats::evicted);
      close_pending(oldest->fd, oldest->session);
      pending.erase(oldest);
    }
    connection.session = SSL_new(tls_->get());
    if (connection.session == nullptr) {
      ERR_clear_error();
      ::close(fd);
      continue;
    }
    SSL_set_fd(connection.session, fd);
    SSL_set_accept_state(connection.session);
    pending.push_back(connection);
  }
  return true;
}

bool TlsGate::advance_handshake(Pending& connection) {
  ERR_clear_error();
  const int result = SSL_do_handshake(connection.session);
  if (result == 1) {
    admit(connection);
    return false;
  }
  const int kind = SSL_get_error(connection.session, result);
  if (kind == SSL_ERROR_WANT_READ || kind == SSL_ERROR_WANT_WRITE) {
    connection.events = kind == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
    return true;
  }
  ERR_clear_error();  // the stranger's reasons are not ours to log
  count(&GateStats::failed_handshake);
  close_pending(connection.fd, connection.session);
  return false;
}

void TlsGate::admit(Pending& connection) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (open_admitted_->load() >= static_cast<int64_t>(limits_.max_admitted)) {
      ++stats_.refused_full;
      close_pending(connection.fd, connection.session);
      return;
    }
    ++stats_.admitted;
    ++*open_admitted_;
  }
  set_socket_nonblocking(connection.fd, false);
  auto admitted =
      std::make_unique<AdmittedConnection>(connection.fd, connection.session, connection.peer, open_admitted_);
  try {
    on_admitted_(std::move(admitted));
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s: dropped a connection from %s: %s\n", what_.c_str(), connection.peer.c_str(),
                 error.what());
  }
}

ConnectionThreads::~ConnectionThreads() {
  stop();
}

void ConnectionThreads::join_finished() {
  std::vector<std::thread> done;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (uint64_t id : finished_) {
      done.push_back(std::move(threads_[id]));
      threads_.erase(id);
    }
    finished_.clear();
  }
  for (auto& thread : done) thread.join();
}

void ConnectionThreads::spawn(std::unique_ptr<AdmittedConnection> connection,
                              std::function<void(AdmittedConnection&)> serve) {
  join_finished();
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_) return;  // the connection closes here
  const int fd = connection->fd();
  sockets_.insert(fd);
  const uint64_t id = next_++;
  threads_[id] = std::thread([this, id, fd, owned = std::move(connection), serve = std::move(serve)]() mutable {
    block_sigpipe_on_this_thread();
    serve(*owned);
    {
      // Out of the set before the socket closes, so stop() never shuts down a reused number.
      std::lock_guard<std::mutex> guard(mutex_);
      sockets_.erase(fd);
      finished_.push_back(id);
    }
    owned.reset();
  });
}

void ConnectionThreads::watch(int fd) {
  std::lock_guard<std::mutex> lock(mutex_);
  sockets_.insert(fd);
  if (stopping_) ::shutdown(fd, SHUT_RDWR);
}

void ConnectionThreads::unwatch(int fd) {
  std::lock_guard<std::mutex> lock(mutex_);
  sockets_.erase(fd);
}

void ConnectionThreads::stop() {
  std::map<uint64_t, std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    for (int fd : sockets_) ::shutdown(fd, SHUT_RDWR);
    threads.swap(threads_);
    finished_.clear();
  }
  for (auto& item : threads) item.second.join();
}

}  // namespace sao::net
