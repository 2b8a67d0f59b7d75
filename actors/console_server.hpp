// The run's HTTP endpoint for the introspection console and the web
// dashboard: read-only JSON (/api/actors, /api/metrics, /api/staleness,
// /api/knobs), Prometheus text (/metrics), the dashboard page (/), and
// token-protected control (POST /api/control). It talks to the run only
// through the coordinator's messages, so serving a request never stops an
// actor. httplib stays inside the .cpp.
#pragma once

#include "actors/protocol.hpp"
#include "config/run_config.hpp"

#include <memory>
#include <string>

namespace caf {
class actor;
class actor_system;
}  // namespace caf

namespace sao::actors {

// What one HTTP client may hold of the console. A client that opens a
// connection and sends nothing (or trickles a request) holds one worker
// until the read timeout; with fewer workers than such clients the console
// stops answering (with httplib's defaults, 8 workers, 40 idle sockets made
// it unanswerable for 30 s). httplib's read timeout counts per read, so a
// client that sends one byte every few seconds keeps its worker; more such
// clients than `worker_threads` can still delay other requests, which is
// why the workers are many and the console listens on loopback by default.
struct ConsoleLimits {
  int read_timeout_s = 5;        // per read of a request (headers and body)
  int write_timeout_s = 5;       // per write of a reply
  int keep_alive_timeout_s = 5;  // an idle kept-alive connection is closed after this
  int keep_alive_max_requests = 100;
  size_t max_body_bytes = 1 << 20;  // larger request bodies get 413
  int worker_threads = 64;          // concurrent connections served
};

class ConsoleServer {
 public:
  // Binds config.listen:config.port (when the port is taken, any free port,
  // with a warning); writes RUN_DIR/console.json {url, token} readable by
  // the owner only, and prints the URL. Throws sao::Error when it cannot
  // bind at all, or when a limit is not positive.
  ConsoleServer(caf::actor_system& system, const CoordinatorActor& coordinator, const config::ConsoleSection& config,
                const std::string& run_dir, const ConsoleLimits& limits = {});
  ~ConsoleServer();  // stops serving and joins the server thread
  ConsoleServer(const ConsoleServer&) = delete;
  ConsoleServer& operator=(const ConsoleServer&) = delete;

  int port() const;
  std::string url() const;
  const std::string& token() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Reads RUN_DIR/console.json as written by a running ConsoleServer: {url, token}.
struct ConsoleEndpoint {
  std::string url;
  std::string host;
  int port = 0;
  std::string token;
};
ConsoleEndpoint read_console_endpoint(const std::string& run_dir);

}  // namespace sao::actors
