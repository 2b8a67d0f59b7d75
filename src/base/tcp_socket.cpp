// TCP helpers; see tcp_socket.hpp.
#include "base/tcp_socket.hpp"

#include "base/clock.hpp"
#include "base/error.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace sao::base {

namespace {
std::string error_text(int error) {
  if (error == EAGAIN || error == EWOULDBLOCK) return "timed out";
  return std::strerror(error);
}
}  // namespace

int connect_tcp(const std::string& host, uint16_t port, int64_t timeout_ms, std::string* problem) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
  if (rc != 0) {
    *problem = "cannot resolve '" + host + "': " + ::gai_strerror(rc);
    return -1;
  }
  *problem = "no address";
  int connected = -1;
  const int64_t deadline = steady_ms() + timeout_ms;
  for (addrinfo* a = found; a != nullptr && connected < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    int error = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
    if (error == EINPROGRESS) {
      pollfd item{fd, POLLOUT, 0};
      const int ready = ::poll(&item, 1, static_cast<int>(std::max<int64_t>(0, deadline - steady_ms())));
      socklen_t length = sizeof(error);
      if (ready <= 0) {
        error = ETIMEDOUT;
      } else {
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
      }
    }
    if (error != 0) {
      *problem = std::strerror(error);
      ::close(fd);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    connected = fd;
  }
  ::freeaddrinfo(found);
  return connected;
}

int listen_tcp(const std::string& host, uint16_t port, const std::string& what, uint16_t* bound_port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const std::string address = host + ":" + service;
  const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
  if (rc != 0) throw Error(what + ": cannot resolve " + address + ": " + ::gai_strerror(rc));
  std::string problem = "no address";
  int listening = -1;
  for (addrinfo* a = found; a != nullptr && listening < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 64) != 0) {
      problem = std::strerror(errno);
      ::close(fd);
      continue;
    }
    listening = fd;
  }
  ::freeaddrinfo(found);
  if (listening < 0) throw Error(what + ": cannot listen on " + address + ": " + problem);
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  ::getsockname(listening, reinterpret_cast<sockaddr*>(&bound), &length);
  *bound_port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                  : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return listening;
}

void set_blocking_with_timeouts(int fd, int64_t timeout_ms) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  timeval limit{};
  limit.tv_sec = static_cast<time_t>(timeout_ms / 1000);
  limit.tv_usec = static_cast<suseconds_t>((timeout_ms % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
}

bool send_all(int fd, const void* data, uint64_t size, std::string* problem) {
  const char* next = static_cast<const char*>(data);
  uint64_t left = size;
  while (left > 0) {
    const ssize_t wrote = ::send(fd, next, left, MSG_NOSIGNAL);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) {
      *problem = "send failed after " + std::to_string(size - left) + " of " + std::to_string(size) +
                 " bytes: " + error_text(errno);
      return false;
    }
    next += wrote;
    left -= static_cast<uint64_t>(wrote);
  }
  return true;
}

bool receive_all(int fd, void* data, uint64_t size, std::string* problem) {
  char* next = static_cast<char*>(data);
  uint64_t left = size;
  while (left > 0) {
    const ssize_t got = ::recv(fd, next, left, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got == 0) {
      *problem = "the peer closed the connection after " + std::to_string(size - left) + " of " + std::to_string(size) +
                 " bytes";
      return false;
    }
    if (got < 0) {
      *problem = "receive failed after " + std::to_string(size - left) + " of " + std::to_string(size) +
                 " bytes: " + error_text(errno);
      return false;
    }
    next += got;
    left -= static_cast<uint64_t>(got);
  }
  return true;
}

}  // namespace sao::base
