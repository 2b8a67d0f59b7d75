// The event-driven HTTP front (net/event_http_server.hpp) under clients
// that never finish: a newcomer over the per-address cap displaces the
// oldest unfinished request; a request still trickling at the whole-request
// deadline gets 408 although every read succeeded; oversized headers,
// chunked bodies, oversized and malformed Content-Length are answered by
// the front itself; a port another socket listens on is refused rather
// than shared (no SO_REUSEPORT), for the console and the bulk weight server;
// and connections are kept alive between requests (pipelined ones too)
// unless the request, the reply or the limits end them.
#include "base/error.hpp"
#include "base/tcp_socket.hpp"
#include "net/event_http_server.hpp"
#include "test_process_helpers.hpp"

#include <doctest/doctest.h>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace {

using sao_test::connect_loopback;
using sao_test::read_one_http_reply;

// Echoes the request line, so a reply shows which request it answers.
std::string echo_request_line(const sao::net::RawHttpRequest& request) {
  const std::string line = request.bytes.substr(0, request.bytes.find("\r\n"));
  return "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(line.size()) + "\r\nConnection: close\r\n\r\n" + line;
}

// Echoes the request line and keeps the connection when the front offers it,
// as the run's HTTP router does.
std::string echo_keeping_alive(const sao::net::RawHttpRequest& request) {
  const std::string line = request.bytes.substr(0, request.bytes.find("\r\n"));
  return "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(line.size()) +
         (request.keep_alive ? "\r\nKeep-Alive: timeout=30\r\n\r\n" : "\r\nConnection: close\r\n\r\n") + line;
}

void send_text(int fd, const std::string& text) {
  REQUIRE(::send(fd, text.data(), text.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(text.size()));
}

// Reads until the server closes the connection.
std::string read_to_end(int fd) {
  std::string reply;
  char buffer[4096];
  for (ssize_t got; (got = ::recv(fd, buffer, sizeof(buffer), 0)) > 0;) reply.append(buffer, static_cast<size_t>(got));
  return reply;
}

// A connection that has sent `text` (a request, whole or in part).
int connect_with(uint16_t port, const std::string& text) {
  const int fd = connect_loopback(port);
  send_text(fd, text);
  return fd;
}

std::string exchange(uint16_t port, const std::string& request) {
  const int fd = connect_with(port, request);
  auto reply = read_to_end(fd);
  ::close(fd);
  return reply;
}

// True while the server keeps the connection open (nothing to read yet).
bool still_open(int fd) {
  char byte = 0;
  return ::recv(fd, &byte, 1, MSG_DONTWAIT) < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

// Waits for the server's own account of an event, not for time.
void wait_for(const sao::net::EventHttpServer& server,
              const std::function<bool(const sao::net::EventHttpStats&)>& reached) {
  while (!reached(server.stats())) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

std::string body_of(const std::string& reply) {
  const auto end = reply.find("\r\n\r\n");
  return end == std::string::npos ? "" : reply.substr(end + 4);
}

}  // namespace

TEST_CASE("a newcomer over the per-address cap displaces the oldest unfinished request and is answered") {
  sao::net::EventHttpLimits limits;
  limits.max_connections_per_address = 3;
  sao::net::EventHttpServer server("127.0.0.1", 0, "test", limits, echo_request_line);
  std::vector<int> slow;
  for (int i = 0; i < 3; ++i) slow.push_back(connect_with(server.port(), "GET /slow HTTP/1.1\r\nX-Slow: "));
  wait_for(server, [](const auto& stats) { return stats.reading == 3; });
  CHECK(exchange(server.port(), "GET /normal HTTP/1.1\r\nHost: x\r\n\r\n") ==
        "HTTP/1.1 200 OK\r\nContent-Length: 20\r\nConnection: close\r\n\r\nGET /normal HTTP/1.1");
  CHECK(read_to_end(slow[0]).empty());  // the oldest: closed without a reply
  CHECK(still_open(slow[1]));
  CHECK(still_open(slow[2]));
  const auto stats = server.stats();
  CHECK(stats.accepted == 4);
  CHECK(stats.displaced == 1);
  CHECK(stats.refused == 0);
  CHECK(stats.answered == 1);
  CHECK(stats.reading == 2);
  for (int fd : slow) ::close(fd);
}

TEST_CASE("over the total cap the oldest unfinished request from any address makes room") {
  sao::net::EventHttpLimits limits;
  limits.max_connections = 2;
  sao::net::EventHttpServer server("127.0.0.1", 0, "test", limits, echo_request_line);
  const int first = connect_with(server.port(), "GET /a HTTP/1.1\r\n");
  const int second = connect_with(server.port(), "GET /b HTTP/1.1\r\n");
  wait_for(server, [](const auto& stats) { return stats.reading == 2; });
  CHECK(body_of(exchange(server.port(), "GET /c HTTP/1.1\r\n\r\n")) == "GET /c HTTP/1.1");
  CHECK(read_to_end(first).empty());
  CHECK(still_open(second));
  CHECK(server.stats().displaced == 1);
  ::close(first);
  ::close(second);
}

TEST_CASE("a request still trickling at the whole-request deadline gets 408, though every read succeeded") {
  sao::net::EventHttpLimits limits;
  limits.request_timeout_s = 1;
  sao::net::EventHttpServer server("127.0.0.1", 0, "test", limits, echo_request_line);
  const int fd = connect_with(server.port(), "GET / HTTP/1.1\r\nX-Slow: ");
  // One byte per 100 ms: far more often than any per-read timeout, so only a
  // deadline for the whole request ends it.
  pollfd item{fd, POLLIN, 0};
  while (::poll(&item, 1, 100) == 0) {
    [[maybe_unused]] auto sent = ::send(fd, "a", 1, MSG_NOSIGNAL);
  }
  const auto reply = read_to_end(fd);
  ::close(fd);
  CHECK(reply.rfind("HTTP/1.1 408 Request Timeout\r\n", 0) == 0);
  CHECK(body_of(reply) == R"j({"error":"the request was not complete within 1 s of connecting (request_timeout_s)"})j");
  CHECK(server.stats().timed_out == 1);
}

TEST_CASE("the front answers oversized headers, chunked bodies and bad lengths itself, naming the limit") {
  sao::net::EventHttpLimits limits;
  limits.max_header_bytes = 1024;
  limits.max_body_bytes = 100;
  std::atomic<int> handled{0};
  sao::net::EventHttpServer server("127.0.0.1", 0, "test", limits, [&](const sao::net::RawHttpRequest& request) {
    ++handled;
    return echo_request_line(request);
  });
  const auto big_headers = exchange(server.port(), "GET / HTTP/1.1\r\nX-Big: " + std::string(2000, 'a') + "\r\n\r\n");
  CHECK(big_headers.rfind("HTTP/1.1 431 ", 0) == 0);
  CHECK(body_of(big_headers) == R"j({"error":"request line and headers are over the limit of 1024 bytes"})j");
  const auto chunked =
      exchange(server.port(), "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
  CHECK(chunked.rfind("HTTP/1.1 411 ", 0) == 0);
  CHECK(body_of(chunked) == R"j({"error":"Transfer-Encoding is not accepted; send the body with Content-Length"})j");
  // The body is never sent: the front answers from the header alone.
  const auto too_long = exchange(server.port(), "POST / HTTP/1.1\r\nContent-Length: 5000\r\n\r\n");
  CHECK(too_long.rfind("HTTP/1.1 413 ", 0) == 0);
  CHECK(body_of(too_long) == R"j({"error":"request body of 5000 bytes is over the limit of 100 bytes"})j");
  const auto not_a_number = exchange(server.port(), "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n");
  CHECK(body_of(not_a_number) == R"j({"error":"Content-Length '-1' is not a byte count"})j");
  const auto two_lengths =
      exchange(server.port(), "POST / HTTP/1.1\r\nContent-Length: 1\r\ncontent-length: 2\r\n\r\nab");
  CHECK(body_of(two_lengths) == R"j({"error":"two different Content-Length headers"})j");
  CHECK(handled == 0);
  CHECK(server.stats().rejected == 5);
  // A body within the limit reaches the handler whole, in pieces or not.
  const int fd = connect_with(server.port(), "POST /body HTTP/1.1\r\nContent-Length: 4\r\n\r\nab");
  send_text(fd, "cd");
  CHECK(body_of(read_to_end(fd)) == "POST /body HTTP/1.1");
  ::close(fd);
  CHECK(handled == 1);
}

TEST_CASE("a handler that throws gives a 500 naming the failure") {
  sao::net::EventHttpServer server("127.0.0.1", 0, "test", {},
                                   [](const sao::net::RawHttpRequest&) -> std::string { throw sao::Error("no run"); });
  const auto reply = exchange(server.port(), "GET / HTTP/1.1\r\n\r\n");
  CHECK(reply.rfind("HTTP/1.1 500 ", 0) == 0);
  CHECK(body_of(reply) == R"j({"error":"the handler failed: no run"})j");
}

TEST_CASE("a port another socket listens on is refused, not shared, even when that socket allows SO_REUSEPORT") {
  uint16_t port = 0;
  const int other = sao_test::listen_loopback_sharing_port(&port);
  const std::string taken = "127.0.0.1:" + std::to_string(port) + ": Address already in use";
  CHECK(sao_test::error_of([&] { sao::net::EventHttpServer("127.0.0.1", port, "console", {}, echo_request_line); }) ==
        "console: cannot listen on " + taken);
  // The bulk weight server listens through the same call.
  uint16_t bound = 0;
  CHECK(sao_test::error_of([&] { sao::base::listen_tcp("127.0.0.1", port, "bulk server", &bound); }) ==
        "bulk server: cannot listen on " + taken);
  sao::net::EventHttpServer first("127.0.0.1", 0, "console", {}, echo_request_line);
  CHECK(sao_test::error_of([&] {
          sao::net::EventHttpServer("127.0.0.1", first.port(), "console", {}, echo_request_line);
        }) == "console: cannot listen on 127.0.0.1:" + std::to_string(first.port()) + ": Address already in use");
  ::close(other);
}

TEST_CASE("limits that are not positive are refused by name") {
  sao::net::EventHttpLimits limits;
  limits.max_connections_per_address = 0;
  CHECK(sao_test::error_of([&] { sao::net::check_event_http_limits(limits, "console"); }) ==
        "console: every limit must be positive (timeouts, header and body size, connections, per-address "
        "connections, workers, idle timeout, requests per connection)");
  limits = {};
  limits.idle_timeout_s = 0;
  CHECK_THROWS_WITH_AS(sao::net::check_event_http_limits(limits, "agent endpoint"),
                       doctest::Contains("agent endpoint: every limit must be positive"), sao::Error);
  limits = {};
  limits.max_requests_per_connection = -1;
  CHECK_THROWS_WITH_AS(sao::net::check_event_http_limits(limits, "agent endpoint"),
                       doctest::Contains("agent endpoint: every limit must be positive"), sao::Error);
}

TEST_CASE("a kept-alive connection carries one request after another, pipelined ones in order") {
  sao::net::EventHttpServer server("127.0.0.1", 0, "test", {}, echo_keeping_alive);
  const int fd = connect_with(server.port(), "GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(read_one_http_reply(fd) ==
        "HTTP/1.1 200 OK\r\nContent-Length: 15\r\nKeep-Alive: timeout=30\r\n\r\nGET /a HTTP/1.1");
  wait_for(server, [](const auto& stats) { return stats.idle == 1; });
  CHECK(server.stats().reading == 0);
  send_text(fd, "POST /b HTTP/1.1\r\nContent-Length: 3\r\n\r\nxyz");
  CHECK(body_of(read_one_http_reply(fd)) == "POST /b HTTP/1.1");
  // Three requests in one write, the last one's body split off: answered in order.
  send_text(fd, "GET /c HTTP/1.1\r\n\r\nPOST /d HTTP/1.1\r\nContent-Length: 2\r\n\r\nokGET /e HTTP/1.1\r\nX: y");
  CHECK(body_of(read_one_http_reply(fd)) == "GET /c HTTP/1.1");
  CHECK(body_of(read_one_http_reply(fd)) == "POST /d HTTP/1.1");
  CHECK(still_open(fd));
  send_text(fd, "\r\n\r\n");
  CHECK(body_of(read_one_http_reply(fd)) == "GET /e HTTP/1.1");
  wait_for(server, [](const auto& stats) { return stats.idle == 1; });
  const auto stats = server.stats();
  CHECK(stats.accepted == 1);
  CHECK(stats.answered == 5);
  CHECK(stats.reused == 4);
  CHECK(stats.open == 1);
  ::close(fd);
}

TEST_CASE("the connection ends with the reply for HTTP/1.0, Connection: close, a closing reply or the request limit") {
  sao::net::EventHttpLimits limits;
  limits.max_requests_per_connection = 2;
  sao::net::EventHttpServer server("127.0.0.1", 0, "test", limits, echo_keeping_alive);
  CHECK(exchange(server.port(), "GET /old HTTP/1.0\r\n\r\n") ==
        "HTTP/1.1 200 OK\r\nContent-Length: 17\r\nConnection: close\r\n\r\nGET /old HTTP/1.0");
  CHECK(body_of(exchange(server.port(), "GET /bye HTTP/1.1\r\nConnection: Upgrade, Close\r\n\r\n")) ==
        "GET /bye HTTP/1.1");
  // HTTP/1.0 may ask for keep-alive.
  const int old_kept = connect_with(server.port(), "GET /old HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  CHECK(read_one_http_reply(old_kept).find("Keep-Alive: timeout=30") != std::string::npos);
  // The second request on a connection is its last (max_requests_per_connection 2).
  send_text(old_kept, "GET /second HTTP/1.1\r\n\r\n");
  CHECK(read_to_end(old_kept) ==
        "HTTP/1.1 200 OK\r\nContent-Length: 20\r\nConnection: close\r\n\r\nGET /second HTTP/1.1");
  ::close(old_kept);
  // A handler may end the connection itself; a reply without Content-Length always does.
  sao::net::EventHttpServer closing("127.0.0.1", 0, "test", {}, echo_request_line);
  CHECK(body_of(exchange(closing.port(), "GET /x HTTP/1.1\r\n\r\n")) == "GET /x HTTP/1.1");
  sao::net::EventHttpServer unframed("127.0.0.1", 0, "test", {}, [](const sao::net::RawHttpRequest&) {
    return std::string("HTTP/1.1 200 OK\r\n\r\nall");
  });
  CHECK(exchange(unframed.port(), "GET /x HTTP/1.1\r\n\r\n") == "HTTP/1.1 200 OK\r\n\r\nall");
  CHECK(server.stats().reused == 1);
}

TEST_CASE("an idle kept-alive connection is closed after idle_timeout_s and is the first to make room") {
  sao::net::EventHttpLimits limits;
  limits.idle_timeout_s = 1;
  limits.max_connections_per_address = 2;
  sao::net::EventHttpServer server("127.0.0.1", 0, "test", limits, echo_keeping_alive);
  // The unfinished request is older than the idle connection, yet stays.
  const int unfinished = connect_with(server.port(), "GET /slow HTTP/1.1\r\nX-Slow: ");
  const int kept = connect_with(server.port(), "GET /a HTTP/1.1\r\n\r\n");
  CHECK(body_of(read_one_http_reply(kept)) == "GET /a HTTP/1.1");
  wait_for(server, [](const auto& stats) { return stats.idle == 1 && stats.reading == 1; });
  CHECK(body_of(exchange(server.port(), "GET /new HTTP/1.1\r\nConnection: close\r\n\r\n")) == "GET /new HTTP/1.1");
  CHECK(read_to_end(kept).empty());
  CHECK(still_open(unfinished));
  CHECK(server.stats().displaced == 0);
  ::close(kept);
  ::close(unfinished);
  // Left idle, a connection is closed without a word once idle_timeout_s passes.
  const int idle = connect_with(server.port(), "GET /b HTTP/1.1\r\n\r\n");
  CHECK(body_of(read_one_http_reply(idle)) == "GET /b HTTP/1.1");
  CHECK(read_to_end(idle).empty());
  ::close(idle);
  CHECK(server.stats().timed_out == 0);
}

TEST_CASE("after a kept-alive reply the next request has its own deadline and is refused like a first one") {
  sao::net::EventHttpLimits limits;
  limits.request_timeout_s = 1;
  limits.idle_timeout_s = 3600;
  sao::net::EventHttpServer server("127.0.0.1", 0, "test", limits, echo_keeping_alive);
  const int fd = connect_with(server.port(), "GET /a HTTP/1.1\r\n\r\n");
  CHECK(body_of(read_one_http_reply(fd)) == "GET /a HTTP/1.1");
  send_text(fd, "GET /b HTTP/1.1\r\nX-Slow: ");
  const auto late = read_to_end(fd);
  ::close(fd);
  CHECK(late.rfind("HTTP/1.1 408 ", 0) == 0);
  CHECK(server.stats().timed_out == 1);
  // A refused request ends the connection: what follows it cannot be framed.
  const int chunked = connect_with(server.port(), "GET /a HTTP/1.1\r\n\r\n");
  CHECK(body_of(read_one_http_reply(chunked)) == "GET /a HTTP/1.1");
  send_text(chunked, "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /c HTTP/1.1\r\n\r\n");
  const auto refused = read_to_end(chunked);
  ::close(chunked);
  CHECK(refused.rfind("HTTP/1.1 411 ", 0) == 0);
  CHECK(refused.find("GET /c") == std::string::npos);
}
