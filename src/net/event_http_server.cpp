// Event-driven HTTP front; see event_http_server.hpp.
#include "net/event_http_server.hpp"

#include "base/clock.hpp"
#include "base/error.hpp"
#include "base/json_parse.hpp"
#include "base/tcp_socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace sao::net {

namespace {

// A wide backlog: hundreds of clients may connect in the same instant, and
// a connection dropped from a full backlog waits a second for its SYN retry.
constexpr int kListenBacklog = 1024;

const char* http_status_text(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 408:
      return "Request Timeout";
    case 411:
      return "Length Required";
    case 413:
      return "Payload Too Large";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    default:
      return "Error";
  }
}

std::string lower_ascii(std::string text) {
  for (char& c : text) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return text;
}

std::string trim_http_space(const std::string& text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

// What the front needs of the headers: where the request ends, and whether
// the client lets the connection stay open after the reply.
struct RequestFraming {
  int reject_status = 0;  // non-zero: answer this at once, with `problem`
  std::string problem;
  uint64_t content_length = 0;
  bool wants_close = false;  // HTTP/1.0 without keep-alive, or Connection: close
};

// True when the comma-separated header value lists `token` (any case).
bool lists_token(const std::string& value, const std::string& token) {
  size_t start = 0;
  while (start <= value.size()) {
    const size_t comma = std::min(value.find(',', start), value.size());
    if (lower_ascii(trim_http_space(value.substr(start, comma - start))) == token) return true;
    start = comma + 1;
  }
  return false;
}

// The header fields of a request's or reply's head (its first line, then
// "Name: value" lines, each ending in CRLF): names in lower case, values
// trimmed. A line without a colon is skipped (httplib refuses a request
// with one itself).
std::vector<std::pair<std::string, std::string>> header_fields(const std::string& head) {
  std::vector<std::pair<std::string, std::string>> fields;
  size_t line_start = head.find("\r\n");
  while (line_start != std::string::npos && line_start + 2 < head.size()) {
    line_start += 2;
    const size_t line_end = head.find("\r\n", line_start);
    const std::string line = head.substr(line_start, line_end - line_start);
    line_start = line_end;
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    fields.emplace_back(lower_ascii(trim_http_space(line.substr(0, colon))), trim_http_space(line.substr(colon + 1)));
  }
  return fields;
}

RequestFraming read_request_framing(const std::string& head, const EventHttpLimits& limits) {
  RequestFraming framing;
  bool has_length = false;
  const std::string request_line = head.substr(0, head.find("\r\n"));
  const bool http10 = request_line.size() >= 8 && request_line.compare(request_line.size() - 8, 8, "HTTP/1.0") == 0;
  bool asks_close = false;
  bool asks_keep_alive = false;
  for (const auto& [name, value] : header_fields(head)) {
    if (name == "connection") {
      asks_close = asks_close || lists_token(value, "close");
      asks_keep_alive = asks_keep_alive || lists_token(value, "keep-alive");
      continue;
    }
    if (name == "transfer-encoding") {
      framing.reject_status = 411;
      framing.problem = "Transfer-Encoding is not accepted; send the body with Content-Length";
      return framing;
    }
    if (name != "content-length") continue;
    if (value.empty() || value.size() > 18 || value.find_first_not_of("0123456789") != std::string::npos) {
      framing.reject_status = 400;
      framing.problem = "Content-Length '" + value.substr(0, 32) + "' is not a byte count";
      return framing;
    }
    const uint64_t length = std::stoull(value);
    if (has_length && length != framing.content_length) {
      framing.reject_status = 400;
      framing.problem = "two different Content-Length headers";
      return framing;
    }
    has_length = true;
    framing.content_length = length;
  }
  framing.wants_close = asks_close || (http10 && !asks_keep_alive);
  if (framing.content_length > limits.max_body_bytes) {
    framing.reject_status = 413;
    framing.problem = "request body of " + std::to_string(framing.content_length) + " bytes is over the limit of " +
                      std::to_string(limits.max_body_bytes) + " bytes";
  }
  return framing;
}

// True when the connection may stay open after this reply: it has a
// Content-Length (a reply without one ends where the connection does) and
// does not say Connection: close.
bool reply_keeps_connection(const std::string& reply) {
  const size_t head_end = reply.find("\r\n\r\n");
  if (head_end == std::string::npos) return false;
  bool has_length = false;
  for (const auto& [name, value] : header_fields(reply.substr(0, head_end + 2))) {
    if (name == "connection" && lists_token(value, "close")) return false;
    if (name == "content-length") has_length = true;
  }
  return has_length;
}

enum class Phase { kReading, kHandling, kWriting, kDraining };

struct HttpConnection {
  uint64_t id = 0;
  int fd = -1;
  std::string address;
  int port = 0;
  Phase phase = Phase::kReading;
  bool idle = false;         // kept alive, no byte of the next request yet
  bool keep_open = false;    // the reply being written leaves the connection open
  int64_t requests = 0;      // requests read on this connection
  std::string data;          // the request while reading, the reply while writing
  std::string pipelined;     // bytes of the next request read with this one
  size_t header_bytes = 0;   // request line + headers + blank line, once seen
  size_t request_bytes = 0;  // the whole request, once the headers are read
  bool wants_close = false;  // the request does not let the connection stay open
  size_t written = 0;
  int64_t deadline_ms = 0;
};

struct HttpJob {
  uint64_t id = 0;
  RawHttpRequest request;
};

std::string peer_text(const sockaddr_storage& peer, int* port) {
  char text[INET6_ADDRSTRLEN] = {};
  if (peer.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(peer);
    ::inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof(text));
    *port = ntohs(v6.sin6_port);
  } else {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(peer);
    ::inet_ntop(AF_INET, &v4.sin_addr, text, sizeof(text));
    *port = ntohs(v4.sin_port);
  }
  return text;
}

}  // namespace

std::string http_error_reply(int status, const std::string& message) {
  const std::string body = base::dump_json({{"error", message}});
  return "HTTP/1.1 " + std::to_string(status) + " " + http_status_text(status) +
         "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + body;
}

void check_event_http_limits(const EventHttpLimits& limits, const std::string& what) {
  if (limits.request_timeout_s <= 0 || limits.write_timeout_s <= 0 || limits.max_header_bytes == 0 ||
      limits.max_body_bytes == 0 || limits.max_connections <= 0 || limits.max_connections_per_address <= 0 ||
      limits.worker_threads <= 0 || limits.idle_timeout_s <= 0 || limits.max_requests_per_connection <= 0) {
    throw Error(what +
                ": every limit must be positive (timeouts, header and body size, connections, per-address "
                "connections, workers, idle timeout, requests per connection)");
  }
}

struct EventHttpServer::Impl {
  EventHttpLimits limits;
  Handler handler;
  int listen_fd = -1;
  uint16_t port = 0;
  int wake_read = -1;
  int wake_write = -1;

  // Owned by the poll thread.
  std::map<uint64_t, HttpConnection> connections;  // by id: accept order, oldest first
  std::unordered_map<std::string, int> per_address;
  uint64_t next_id = 1;
  bool accept_paused = false;  // out of file descriptors until a connection closes

  mutable std::mutex stats_mutex;
  EventHttpStats counts;

  std::mutex queue_mutex;
  std::condition_variable queue_ready;
  std::deque<HttpJob> jobs;
  std::vector<std::pair<uint64_t, std::string>> replies;
  bool stopping = false;

  std::thread poll_thread;
  std::vector<std::thread> workers;

  void count(int64_t EventHttpStats::*field) {
    std::lock_guard<std::mutex> lock(stats_mutex);
    ++(counts.*field);
  }

  void wake() {
    const char byte = 1;
    [[maybe_unused]] auto ignored = ::write(wake_write, &byte, 1);
  }

  void close_connection(std::map<uint64_t, HttpConnection>::iterator it) {
    ::close(it->second.fd);
    auto address = per_address.find(it->second.address);
    if (address != per_address.end() && --address->second == 0) per_address.erase(address);
    connections.erase(it);
    accept_paused = false;
  }

  // Replies are written by this thread, never by a worker: a client that
  // reads slowly holds a socket, not a worker.
  void start_reply(HttpConnection& connection, std::string reply) {
    connection.keep_open = connection.keep_open && reply_keeps_connection(reply);
    connection.phase = Phase::kWriting;
    connection.data = std::move(reply);
    connection.written = 0;
    connection.deadline_ms = base::steady_ms() + int64_t{limits.write_timeout_s} * 1000;
  }

  // The front's own answers end the connection: what follows a refused
  // request in the stream cannot be told from its unread body.
  void reject(HttpConnection& connection, int status, const std::string& problem) {
    count(&EventHttpStats::rejected);
    connection.keep_open = false;
    start_reply(connection, http_error_reply(status, problem));
  }

  // Closes, among those `applies` picks, the oldest connection that holds
  // no request (idle between requests, or answered and draining), else the
  // oldest that is still sending its request; false if there is none.
  template <class Predicate>
  bool displace_oldest(Predicate applies) {
    for (const bool finished : {true, false}) {
      for (auto it = connections.begin(); it != connections.end(); ++it) {
        const auto& other = it->second;
        const bool holds_no_request = other.phase == Phase::kDraining || (other.phase == Phase::kReading && other.idle);
        const bool unfinished = other.phase == Phase::kReading && !other.idle;
        if (!(finished ? holds_no_request : unfinished) || !applies(other)) continue;
        if (unfinished) count(&EventHttpStats::displaced);
        close_connection(it);
        return true;
      }
    }
    return false;
  }

  void admit(int fd, const sockaddr_storage& peer) {
    HttpConnection connection;
    connection.fd = fd;
    connection.address = peer_text(peer, &connection.port);
    count(&EventHttpStats::accepted);
    const auto held = per_address.find(connection.address);
    const bool address_full = held != per_address.end() && held->second >= limits.max_connections_per_address;
    if (address_full &&
        !displace_oldest([&](const HttpConnection& other) { return other.address == connection.address; })) {
      count(&EventHttpStats::refused);
      ::close(fd);
      return;
    }
    if (static_cast<int>(connections.size()) >= limits.max_connections &&
        !displace_oldest([](const HttpConnection&) { return true; })) {
      count(&EventHttpStats::refused);
      ::close(fd);
      return;
    }
    connection.deadline_ms = base::steady_ms() + int64_t{limits.request_timeout_s} * 1000;
    connection.id = next_id++;
    ++per_address[connection.address];
    connections.emplace(connection.id, std::move(connection));
  }

  void accept_all() {
    for (;;) {
      sockaddr_storage peer{};
      socklen_t length = sizeof(peer);
      const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&peer), &length, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd >= 0) {
        // Each reply is one write; with Nagle on, a kept-alive connection's
        // reply could wait for the ACK of the last one (delayed up to 40 ms).
        const int on = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
        admit(fd, peer);
        continue;
      }
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) accept_paused = true;
      return;
    }
  }

  // Reads what has arrived; once the request is whole, queues it for a worker.
  // False when the connection is to be closed.
  bool read_request(HttpConnection& connection) {
    char buffer[16 * 1024];
    for (;;) {
      const ssize_t got = ::recv(connection.fd, buffer, sizeof(buffer), 0);
      if (got == 0) return false;
      if (got < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      if (connection.idle) {
        // The next request has begun: its deadline counts from its first byte.
        connection.idle = false;
        connection.deadline_ms = base::steady_ms() + int64_t{limits.request_timeout_s} * 1000;
      }
      const size_t scan_from = connection.data.size() >= 3 ? connection.data.size() - 3 : 0;
      connection.data.append(buffer, static_cast<size_t>(got));
      if (take_request(connection, scan_from)) return true;
    }
  }

  // Looks at the bytes read so far: answers a bad request, queues a whole
  // one (keeping any bytes past it for the next), or waits for more (false).
  // At most one read's worth lies past the request: reading stops once it
  // is whole, so a pipelining client cannot make the server buffer more.
  bool take_request(HttpConnection& connection, size_t scan_from) {
    if (connection.request_bytes == 0) {
      const auto end = connection.data.find("\r\n\r\n", scan_from);
      // Headers unfinished past the limit, or finished beyond it.
      if (end == std::string::npos ? connection.data.size() > limits.max_header_bytes : end > limits.max_header_bytes) {
        reject(connection, 431,
               "request line and headers are over the limit of " + std::to_string(limits.max_header_bytes) + " bytes");
        return true;
      }
      if (end == std::string::npos) return false;
      connection.header_bytes = end + 4;
      const auto framing = read_request_framing(connection.data.substr(0, end + 2), limits);
      if (framing.reject_status != 0) {
        reject(connection, framing.reject_status, framing.problem);
        return true;
      }
      connection.request_bytes = connection.header_bytes + framing.content_length;
      connection.wants_close = framing.wants_close;
    }
    if (connection.data.size() < connection.request_bytes) return false;
    connection.pipelined = connection.data.substr(connection.request_bytes);
    connection.data.resize(connection.request_bytes);
    connection.phase = Phase::kHandling;
    if (connection.requests++ > 0) count(&EventHttpStats::reused);
    connection.keep_open = !connection.wants_close && connection.requests < limits.max_requests_per_connection;
    HttpJob job{connection.id, {std::move(connection.data), connection.address, connection.port, connection.keep_open}};
    connection.data.clear();
    {
      std::lock_guard<std::mutex> lock(queue_mutex);
      jobs.push_back(std::move(job));
    }
    queue_ready.notify_one();
    return true;
  }

  // After a kept-alive reply: wait for the next request, or take the one
  // already read.
  void await_next_request(HttpConnection& connection) {
    connection.phase = Phase::kReading;
    connection.data = std::move(connection.pipelined);
    connection.pipelined.clear();
    connection.header_bytes = 0;
    connection.request_bytes = 0;
    connection.wants_close = false;
    connection.keep_open = false;
    connection.written = 0;
    connection.idle = connection.data.empty();
    connection.deadline_ms =
        base::steady_ms() + int64_t{connection.idle ? limits.idle_timeout_s : limits.request_timeout_s} * 1000;
    if (!connection.idle) take_request(connection, 0);
  }

  // False when the connection is to be closed.
  bool write_reply(HttpConnection& connection) {
    while (connection.written < connection.data.size()) {
      const ssize_t sent = ::send(connection.fd, connection.data.data() + connection.written,
                                  connection.data.size() - connection.written, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (sent < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      connection.written += static_cast<size_t>(sent);
    }
    count(&EventHttpStats::answered);
    if (connection.keep_open) {
      await_next_request(connection);
      // A pipelined request may have been refused by the front at once.
      return connection.phase != Phase::kWriting || write_reply(connection);
    }
    // Closing with unread request bytes would reset the connection and could
    // destroy the reply in flight: end our side, then wait for the client's.
    ::shutdown(connection.fd, SHUT_WR);
    connection.phase = Phase::kDraining;
    connection.data.clear();
    connection.data.shrink_to_fit();
    return true;
  }

  // False when the connection is to be closed.
  bool drain(HttpConnection& connection) {
    char buffer[4096];
    for (;;) {
      const ssize_t got = ::recv(connection.fd, buffer, sizeof(buffer), 0);
      if (got == 0) return false;
      if (got < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    }
  }

  void take_replies() {
    std::vector<std::pair<uint64_t, std::string>> done;
    {
      std::lock_guard<std::mutex> lock(queue_mutex);
      done.swap(replies);
    }
    for (auto& [id, reply] : done) {
      auto it = connections.find(id);
      if (it == connections.end()) continue;
      start_reply(it->second, std::move(reply));
      if (!write_reply(it->second)) close_connection(it);
    }
  }

  void expire(int64_t now) {
    for (auto it = connections.begin(); it != connections.end();) {
      auto current = it++;
      auto& connection = current->second;
      if (connection.phase == Phase::kHandling || now < connection.deadline_ms) continue;
      if (connection.phase == Phase::kReading && connection.idle) {
        close_connection(current);  // kept alive, and not used again in time
        continue;
      }
      if (connection.phase == Phase::kReading) {
        count(&EventHttpStats::timed_out);
        start_reply(connection, http_error_reply(408, "the request was not complete within " +
                                                          std::to_string(limits.request_timeout_s) +
                                                          " s of connecting (request_timeout_s)"));
        if (write_reply(connection)) continue;
      } else if (connection.phase == Phase::kWriting) {
        count(&EventHttpStats::timed_out);
      }
      close_connection(current);
    }
  }

  void publish_stats() {
    int64_t reading = 0;
    int64_t idle = 0;
    for (const auto& item : connections) {
      const bool waiting = item.second.phase == Phase::kReading;
      reading += waiting && !item.second.idle ? 1 : 0;
      idle += waiting && item.second.idle ? 1 : 0;
    }
    std::lock_guard<std::mutex> lock(stats_mutex);
    counts.open = static_cast<int64_t>(connections.size());
    counts.reading = reading;
    counts.idle = idle;
  }

  void poll_loop() {
    std::vector<pollfd> items;
    std::vector<uint64_t> ids;
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(queue_mutex);
        if (stopping) break;
      }
      items.clear();
      ids.clear();
      items.push_back({wake_read, POLLIN, 0});
      items.push_back({listen_fd, static_cast<short>(accept_paused ? 0 : POLLIN), 0});
      int64_t next_deadline = -1;
      for (const auto& [id, connection] : connections) {
        if (connection.phase == Phase::kHandling) continue;
        items.push_back({connection.fd, static_cast<short>(connection.phase == Phase::kWriting ? POLLOUT : POLLIN), 0});
        ids.push_back(id);
        if (next_deadline < 0 || connection.deadline_ms < next_deadline) next_deadline = connection.deadline_ms;
      }
      const int wait_ms =
          next_deadline < 0 ? -1 : static_cast<int>(std::max<int64_t>(0, next_deadline - base::steady_ms()) + 1);
      if (::poll(items.data(), items.size(), wait_ms) < 0 && errno != EINTR) break;
      if (items[0].revents != 0) {
        char drained[256];
        while (::read(wake_read, drained, sizeof(drained)) > 0) {
        }
        take_replies();
      }
      for (size_t k = 2; k < items.size(); ++k) {
        if (items[k].revents == 0) continue;
        auto it = connections.find(ids[k - 2]);
        if (it == connections.end()) continue;  // displaced by an admission in this round
        auto& connection = it->second;
        bool keep = true;
        if (connection.phase == Phase::kReading) keep = read_request(connection);
        if (keep && connection.phase == Phase::kWriting) keep = write_reply(connection);
        if (keep && connection.phase == Phase::kDraining && (items[k].revents & POLLOUT) == 0) keep = drain(connection);
        if (!keep || (items[k].revents & (POLLERR | POLLNVAL)) != 0) close_connection(it);
      }
      if (items[1].revents != 0) accept_all();
      expire(base::steady_ms());
      publish_stats();
    }
    for (auto& item : connections) ::close(item.second.fd);
    connections.clear();
  }

  void work() {
    for (;;) {
      HttpJob job;
      {
        std::unique_lock<std::mutex> lock(queue_mutex);
        queue_ready.wait(lock, [this] { return stopping || !jobs.empty(); });
        if (stopping) return;
        job = std::move(jobs.front());
        jobs.pop_front();
      }
      std::string reply;
      try {
        reply = handler(job.request);
      } catch (const std::exception& error) {
        reply = http_error_reply(500, std::string("the handler failed: ") + error.what());
      }
      {
        std::lock_guard<std::mutex> lock(queue_mutex);
        replies.emplace_back(job.id, std::move(reply));
      }
      wake();
    }
  }
};

EventHttpServer::EventHttpServer(const std::string& host, uint16_t port, const std::string& what,
                                 const EventHttpLimits& limits, Handler handler)
    : impl_(std::make_unique<Impl>()) {
  check_event_http_limits(limits, what);
  auto& impl = *impl_;
  impl.limits = limits;
  impl.handler = std::move(handler);
  impl.listen_fd = base::listen_tcp(host, port, what, &impl.port);
  ::listen(impl.listen_fd, kListenBacklog);
  ::fcntl(impl.listen_fd, F_SETFL, ::fcntl(impl.listen_fd, F_GETFL) | O_NONBLOCK);
  int wake_pipe[2];
  if (::pipe2(wake_pipe, O_NONBLOCK | O_CLOEXEC) != 0) {
    ::close(impl.listen_fd);
    throw Error(what + ": cannot make the wake-up pipe");
  }
  impl.wake_read = wake_pipe[0];
  impl.wake_write = wake_pipe[1];
  impl.poll_thread = std::thread([&impl] { impl.poll_loop(); });
  for (int i = 0; i < limits.worker_threads; ++i) impl.workers.emplace_back([&impl] { impl.work(); });
}

EventHttpServer::~EventHttpServer() {
  auto& impl = *impl_;
  {
    std::lock_guard<std::mutex> lock(impl.queue_mutex);
    impl.stopping = true;
  }
  impl.queue_ready.notify_all();
  impl.wake();
  impl.poll_thread.join();
  for (auto& worker : impl.workers) worker.join();
  ::close(impl.listen_fd);
  ::close(impl.wake_read);
  ::close(impl.wake_write);
}

uint16_t EventHttpServer::port() const {
  return impl_->port;
}

EventHttpStats EventHttpServer::stats() const {
  std::lock_guard<std::mutex> lock(impl_->stats_mutex);
  return impl_->counts;
}

}  // namespace sao::net
