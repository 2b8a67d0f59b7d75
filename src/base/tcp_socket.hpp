// TCP connect and listen, shared by every plain socket sao opens itself (an
// external environment's JSON-lines channel, the bulk weight channel), so
// name resolution, the connect timeout and the errors read the same.
#pragma once

#include <cstdint>
#include <string>

namespace sao::base {

// Resolves host (a name, IPv4 or IPv6 literal) and connects to the first
// address that answers within `timeout_ms` in all. Returns a non-blocking
// socket with TCP_NODELAY and close-on-exec, or -1 with `*problem` set to
// why ("cannot resolve ...: <reason>", or the last connect error, e.g.
// "Connection refused", "Connection timed out").
int connect_tcp(const std::string& host, uint16_t port, int64_t timeout_ms, std::string* problem);

// Listens on host:port (port 0: any free port) and returns the blocking
// listening socket (close-on-exec, SO_REUSEADDR) and the bound port.
// Throws sao::Error naming `what` and the address when it cannot.
int listen_tcp(const std::string& host, uint16_t port, const std::string& what, uint16_t* bound_port);

// Sets blocking mode and send/receive timeouts (0 = none) on a socket.
void set_blocking_with_timeouts(int fd, int64_t timeout_ms);

// Writes all `size` bytes (retrying short writes and EINTR; no SIGPIPE).
// False on error or timeout, with `*problem` set.
bool send_all(int fd, const void* data, uint64_t size, std::string* problem);

// Reads exactly `size` bytes. False on error, timeout or end of stream, with
// `*problem` set ("the peer closed the connection after N of M bytes", ...).
bool receive_all(int fd, void* data, uint64_t size, std::string* problem);

}  // namespace sao::base
