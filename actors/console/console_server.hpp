// The run's HTTP endpoint for the introspection console and the web
// dashboard: read-only JSON (/api/actors, /api/metrics, /api/staleness,
// /api/knobs), Prometheus text (/metrics), the dashboard page (/), and
// token-protected control (POST /api/control). It talks to the run only
// through the coordinator's messages, so serving a request never stops an
// actor. httplib stays inside the .cpp.
#pragma once

#include "actors/protocol.hpp"
#include "config/run_config.hpp"
#include "net/event_http_server.hpp"

#include <memory>
#include <string>

namespace caf {
class actor;
class actor_system;
}  // namespace caf

namespace sao::actors {

// What HTTP clients may hold of the console (net/event_http_server.hpp):
// requests are read whole by one poll thread before a handler worker sees
// them, so a client that trickles its request holds a socket until the
// whole-request deadline, never a worker; per-address and total connection
// caps displace the oldest unfinished request instead of refusing a newcomer.
using ConsoleLimits = net::EventHttpLimits;

class ConsoleServer {
 public:
  // Binds config.listen:config.port without SO_REUSEPORT (when another
  // process listens there, any free port, with a warning); writes
  // RUN_DIR/console.json {url, token} readable by the owner only, and
  // prints the URL. Throws sao::Error when it cannot
  // bind at all, or when a limit is not positive.
  ConsoleServer(caf::actor_system& system, const CoordinatorActor& coordinator, const config::ConsoleSection& config,
                const std::string& run_dir, const ConsoleLimits& limits = {});
  ~ConsoleServer();  // stops serving and joins its threads
  ConsoleServer(const ConsoleServer&) = delete;
  ConsoleServer& operator=(const ConsoleServer&) = delete;

  int port() const;
  std::string url() const;
  const std::string& token() const;
  net::EventHttpStats connection_stats() const;

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
