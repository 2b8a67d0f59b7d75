// Shared HTTP pieces; see http_router.hpp.
#include "actors/http/http_router.hpp"

#include "base/error.hpp"
#include "base/json_parse.hpp"
#include "base/small_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <random>

namespace sao::actors::http {

namespace {
// One request the event front has read whole, as httplib's parser reads a
// socket; the reply httplib writes is collected for the front to send.
class CompleteRequestStream : public httplib::Stream {
 public:
  explicit CompleteRequestStream(const net::RawHttpRequest& request) : request_(request) {}
  bool is_readable() const override { return position_ < request_.bytes.size(); }
  bool is_writable() const override { return true; }
  ssize_t read(char* ptr, size_t size) override {
    const size_t count = std::min(size, request_.bytes.size() - position_);
    std::copy_n(request_.bytes.data() + position_, count, ptr);
    position_ += count;
    return static_cast<ssize_t>(count);
  }
  ssize_t write(const char* ptr, size_t size) override {
    reply_.append(ptr, size);
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = request_.remote_address;
    port = request_.remote_port;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip.clear();
    port = 0;
  }
  // No socket: httplib must not select() on one (it answers 500 to
  // descriptors past FD_SETSIZE, which hundreds of clients reach).
  socket_t socket() const override { return INVALID_SOCKET; }
  std::string take_reply() { return std::move(reply_); }

 private:
  const net::RawHttpRequest& request_;
  size_t position_ = 0;
  std::string reply_;
};
}  // namespace

std::string HttpRouter::answer(const net::RawHttpRequest& request) {
  CompleteRequestStream stream(request);
  bool connection_closed = true;
  process_request(stream, /*close_connection=*/!request.keep_alive, connection_closed, nullptr);
  return stream.take_reply();
}

std::unique_ptr<net::EventHttpServer> listen_or_fall_back(const std::string& host, int64_t port,
                                                          const std::string& what, const std::string& port_key,
                                                          const net::EventHttpLimits& limits, HttpRouter& router) {
  net::check_event_http_limits(limits, what);
  router.set_keep_alive_timeout(limits.idle_timeout_s);
  router.set_keep_alive_max_count(static_cast<size_t>(limits.max_requests_per_connection));
  net::EventHttpServer::Handler handler = [&router](const net::RawHttpRequest& request) {
    return router.answer(request);
  };
  std::string why_not_configured_port;
  if (port > 0) {
    try {
      return std::make_unique<net::EventHttpServer>(host, static_cast<uint16_t>(port), what, limits, handler);
    } catch (const Error& error) {
      why_not_configured_port = error.what();  // the fallback below says it, or fails naming the address
    }
  }
  auto front = std::make_unique<net::EventHttpServer>(host, 0, what + " (" + port_key + ")", limits, handler);
  if (port > 0) {
    std::fprintf(stderr, "%s: port %lld on %s is taken (%s); using %d instead\n", what.c_str(),
                 static_cast<long long>(port), host.c_str(), why_not_configured_port.c_str(), front->port());
  }
  return front;
}

std::string random_token() {
  std::random_device device;
  std::string token;
  const char* hex = "0123456789abcdef";
  for (int i = 0; i < 32; ++i) token.push_back(hex[device() % 16]);
  return token;
}

void write_owner_only(const std::filesystem::path& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) throw Error("cannot write " + path.string());
  const auto written = ::write(fd, text.data(), text.size());
  ::close(fd);
  if (written != static_cast<ssize_t>(text.size())) throw Error("short write to " + path.string());
}

nlohmann::json read_endpoint_file(const std::string& run_dir, const std::string& file_name,
                                  const std::string& enabled_by) {
  const auto path = (std::filesystem::path(run_dir) / file_name).string();
  if (!std::filesystem::exists(path)) {
    throw Error(path + ": not found (is a run with " + enabled_by + " going in " + run_dir + "?)");
  }
  auto document = base::parse_json_limited(base::read_small_file(path), path);
  if (!document.is_object()) throw Error(path + ": expected a JSON object");
  return document;
}

std::string presented_token(const httplib::Request& request) {
  const auto authorization = request.get_header_value("Authorization");
  if (authorization.rfind("Bearer ", 0) == 0 && authorization.size() > 7) return authorization.substr(7);
  return request.get_header_value("X-Sao-Token");
}

void reply_json(httplib::Response& response, int status, const nlohmann::json& body) {
  response.status = status;
  response.set_content(base::dump_json(body), "application/json");
}

void reply_error(httplib::Response& response, int status, const std::string& message) {
  reply_json(response, status, {{"error", message}});
}

}  // namespace sao::actors::http
