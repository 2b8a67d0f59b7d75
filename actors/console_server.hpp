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

class ConsoleServer {
 public:
  // Binds config.listen:config.port (when the port is taken, any free port,
  // with a warning); writes RUN_DIR/console.json {url, token} readable by
  // the owner only, and prints the URL. Throws sao::Error when it cannot
  // bind at all.
  ConsoleServer(caf::actor_system& system, const CoordinatorActor& coordinator, const config::ConsoleSection& config,
                const std::string& run_dir);
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
