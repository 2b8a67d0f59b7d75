// What the run's HTTP endpoints (the console, the agent endpoint) share:
// httplib's request parsing and routing fed complete requests by the event
// front (net/event_http_server.hpp), their tokens and endpoint files.
#pragma once

#include "net/event_http_server.hpp"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <memory>
#include <string>

namespace sao::actors::http {

// httplib's request parsing and routing, fed complete requests instead of
// sockets: its own accept loop gives each connection a worker for as long as
// the client takes to send, which trickling clients used to starve it.
class HttpRouter : public httplib::Server {
 public:
  // The complete reply (status line, headers, body) to one complete request:
  // `Connection: close` unless the front keeps the connection
  // (request.keep_alive), else a Keep-Alive header with the front's limits.
  std::string answer(const net::RawHttpRequest& request);
};

// Serves `router` on host:port with `limits` (the router's Keep-Alive header
// states the front's idle timeout and requests per connection); when that port is taken (another
// process listens there), on any free port, with a line on stderr naming
// both. port 0: any free port. Throws sao::Error naming `what` and the
// address when it cannot listen at all.
std::unique_ptr<net::EventHttpServer> listen_or_fall_back(const std::string& host, int64_t port,
                                                          const std::string& what, const std::string& port_key,
                                                          const net::EventHttpLimits& limits, HttpRouter& router);

// 32 hex digits from std::random_device: a run's bearer token.
std::string random_token();

// Writes `text` to `path` readable by the owner only (0600), replacing it.
// Throws sao::Error naming the path.
void write_owner_only(const std::filesystem::path& path, const std::string& text);

// The endpoint file a run's server wrote (RUN_DIR/`file_name`, by
// write_owner_only) as a JSON object, read within the small-file and JSON
// limits. Throws sao::Error naming the path: missing ("is a run with
// `enabled_by` going in RUN_DIR?"), malformed, or not an object.
nlohmann::json read_endpoint_file(const std::string& run_dir, const std::string& file_name,
                                  const std::string& enabled_by);

// The token a request presents: "Authorization: Bearer TOKEN", else the
// X-Sao-Token header; "" when neither.
std::string presented_token(const httplib::Request& request);

void reply_json(httplib::Response& response, int status, const nlohmann::json& body);
// {"error": message}
void reply_error(httplib::Response& response, int status, const std::string& message);

}  // namespace sao::actors::http
