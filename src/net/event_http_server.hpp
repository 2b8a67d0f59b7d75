// An HTTP/1.1 front that slow clients cannot starve. One thread polls every
// connection and reads each request whole (headers, then a body of
// Content-Length bytes) before a worker sees it; workers only turn complete
// requests into complete replies, and the poll thread writes those out. A
// client that trickles its request therefore holds a socket, never a
// worker, and only until the whole-request deadline (counted from accept,
// not per read). Connections are capped per client address and in total:
// a newcomer over a cap displaces the oldest connection that has not
// finished sending its request, so a normal request from the same address
// (on a loopback console every client shares 127.0.0.1) is still read.
// Connections are kept alive (HTTP/1.1): after a reply the connection waits
// for its next request up to `idle_timeout_s`, unless the request was
// HTTP/1.0 or said `Connection: close`, the reply says `Connection: close`
// or has no Content-Length, or the connection has carried
// `max_requests_per_connection` requests. An idle connection holds no
// request, so it is the first to be closed for a newcomer over a cap. A
// client that keeps its connection saves a TCP handshake and teardown per
// request, which at agent-loop rates is a third of the server's CPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace sao::net {

struct EventHttpLimits {
  int request_timeout_s = 10;              // the whole request must arrive within this of accept (else 408)
  int write_timeout_s = 5;                 // the whole reply must be taken within this
  size_t max_header_bytes = 16 * 1024;     // request line and headers (else 431)
  size_t max_body_bytes = 1 << 20;         // Content-Length over this gets 413 without reading the body
  int max_connections = 1024;              // open at once
  int max_connections_per_address = 256;   // open at once from one client address
  int worker_threads = 8;                  // run the handler, only ever on complete requests
  int idle_timeout_s = 30;                 // a kept-alive connection with no request for this long is closed
  int max_requests_per_connection = 1000;  // the last one's reply says Connection: close
};

// One complete request as it arrived: request line, headers, body.
struct RawHttpRequest {
  std::string bytes;
  std::string remote_address;
  int remote_port = 0;
  // Whether the connection may stay open after this request's reply: the
  // handler answers `Connection: close` when false (httplib does, given
  // close_connection), and may answer it anyway to end the connection.
  bool keep_alive = false;
};

// What the server has done so far; all counts since start except `open`
// `reading` and `idle` (now).
struct EventHttpStats {
  int64_t accepted = 0;   // connections accepted
  int64_t open = 0;       // connections open now
  int64_t reading = 0;    // of those, sending a request (not idle between requests)
  int64_t answered = 0;   // replies written whole
  int64_t displaced = 0;  // unfinished requests closed to admit a newcomer over a cap
  int64_t refused = 0;    // newcomers closed because every connection at the cap was past its request
  int64_t timed_out = 0;  // requests not complete by the deadline (408) and replies not taken in time
  int64_t rejected = 0;   // requests answered by the front itself (400, 411, 413, 431)
  int64_t reused = 0;     // requests that came on a connection kept alive after an earlier reply
  int64_t idle = 0;       // kept-alive connections waiting for their next request now
};

class EventHttpServer {
 public:
  // Returns the complete HTTP reply (status line, headers, body) for one
  // request; runs on a worker thread. An exception becomes a 500.
  using Handler = std::function<std::string(const RawHttpRequest&)>;

  // Listens on host:port (0: any free port) without SO_REUSEPORT, so a port
  // another process listens on is refused (sao::Error naming `what` and the
  // address) instead of shared. Throws sao::Error when a limit is not positive.
  EventHttpServer(const std::string& host, uint16_t port, const std::string& what, const EventHttpLimits& limits,
                  Handler handler);
  ~EventHttpServer();  // stops accepting, closes every connection, joins all threads
  EventHttpServer(const EventHttpServer&) = delete;
  EventHttpServer& operator=(const EventHttpServer&) = delete;

  uint16_t port() const;
  EventHttpStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Throws sao::Error naming `what` when a limit is not positive.
void check_event_http_limits(const EventHttpLimits& limits, const std::string& what);

// A complete reply with a JSON body {"error": message} and Connection: close.
std::string http_error_reply(int status, const std::string& message);

}  // namespace sao::net
