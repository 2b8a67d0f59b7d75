// The console's HTTP server under hostile clients: connections that send
// an incomplete request and keep trickling bytes must not make the console
// unanswerable; a body over the limit gets 413 and a body nested too deep
// gets 400; limits that are not positive are refused. The dashboard page
// ("/") needs no coordinator, so the server runs here without a run.
#include "actors/console_server.hpp"
#include "actors/protocol.hpp"
#include "base/error.hpp"
#include "test_process_helpers.hpp"

#include <doctest/doctest.h>
#include <httplib.h>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

struct ConsoleFixture {
  caf::actor_system_config config;
  std::unique_ptr<caf::actor_system> system;
  fs::path run_dir = fs::temp_directory_path() / ("sao_test_console_server_" + std::to_string(::getpid()));
  std::unique_ptr<sao::actors::ConsoleServer> server;

  explicit ConsoleFixture(const sao::actors::ConsoleLimits& limits = {}) {
    sao::actors::register_protocol(config);
    system = std::make_unique<caf::actor_system>(config);
    fs::remove_all(run_dir);
    sao::config::ConsoleSection section;
    section.port = 0;  // any free port
    server = std::make_unique<sao::actors::ConsoleServer>(*system, sao::actors::CoordinatorActor{}, section,
                                                          run_dir.string(), limits);
  }
  ~ConsoleFixture() {
    server.reset();
    fs::remove_all(run_dir);
  }
};

using sao_test::connect_loopback;

// Clients that each send the start of a request and then one more header
// byte every 200 ms, never finishing: every read succeeds, so a per-read
// timeout never fires and each holds a server worker while it trickles.
class TricklingClients {
 public:
  TricklingClients(int port, int count) {
    for (int i = 0; i < count; ++i) {
      const int fd = connect_loopback(port);
      const std::string start = "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ";
      REQUIRE(::send(fd, start.data(), start.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(start.size()));
      sockets_.push_back(fd);
    }
    thread_ = std::thread([this] {
      while (!stop_) {
        for (int fd : sockets_) [[maybe_unused]] auto sent = ::send(fd, "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        std::this_thread::sleep_for(200ms);
      }
    });
  }
  ~TricklingClients() {
    stop_ = true;
    thread_.join();
    for (int fd : sockets_) ::close(fd);
  }

 private:
  std::vector<int> sockets_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

TEST_CASE("40 clients trickling incomplete requests leave the console answering") {
  ConsoleFixture fixture;
  TricklingClients hostile(fixture.server->port(), 40);
  httplib::Client client("127.0.0.1", fixture.server->port());
  // A hang guard, not a speed requirement: with httplib's default of 8
  // workers this request waited as long as the trickling lasted.
  client.set_read_timeout(120, 0);
  client.set_connection_timeout(120, 0);
  auto reply = client.Get("/");
  REQUIRE(reply);
  CHECK(reply->status == 200);
  CHECK(reply->body.find("<html") != std::string::npos);
}

TEST_CASE("a control body over the size limit gets 413; one nested too deep gets 400 naming the depth") {
  sao::actors::ConsoleLimits limits;
  limits.max_body_bytes = 4096;
  ConsoleFixture fixture(limits);
  httplib::Client client("127.0.0.1", fixture.server->port());
  httplib::Headers headers = {{"Authorization", "Bearer " + fixture.server->token()}};
  auto big = client.Post("/api/control", headers, std::string(5000, ' '), "application/json");
  REQUIRE(big);
  CHECK(big->status == 413);
  auto deep = client.Post("/api/control", headers, std::string(300, '[') + std::string(300, ']'), "application/json");
  REQUIRE(deep);
  CHECK(deep->status == 400);
  CHECK(deep->body.find("nested deeper than 256 levels") != std::string::npos);
  auto not_json = client.Post("/api/control", headers, "{\"command\":", "application/json");
  REQUIRE(not_json);
  CHECK(not_json->status == 400);
  CHECK(not_json->body.find("control: the body") != std::string::npos);
}

TEST_CASE("console limits that are not positive are refused by name") {
  sao::actors::ConsoleLimits limits;
  limits.worker_threads = 0;
  CHECK_THROWS_WITH_AS(ConsoleFixture{limits}, doctest::Contains("every limit must be positive"), sao::Error);
}
