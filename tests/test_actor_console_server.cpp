// The console's HTTP server under hostile clients: connections that send
// an incomplete request and keep trickling bytes must not make the console
// unanswerable; a second console asked for a taken port falls back instead
// of sharing it; a body over the limit gets 413 and a body nested too deep
// gets 400; limits that are not positive are refused. The dashboard page
// ("/") needs no coordinator, so the server runs here without a run.
#include "actors/agent/agent_server.hpp"
#include "actors/cluster/cluster.hpp"
#include "actors/console/console_server.hpp"
#include "actors/protocol.hpp"
#include "base/error.hpp"
#include "test_process_helpers.hpp"

#include <doctest/doctest.h>

#include <httplib.h>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <cstdlib>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
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
  // True while the server has closed none of them.
  bool all_open() const {
    for (int fd : sockets_) {
      char byte = 0;
      if (::recv(fd, &byte, 1, MSG_DONTWAIT) >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) return false;
    }
    return true;
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

TEST_CASE("the console keeps a client's connection between requests and says for how long") {
  ConsoleFixture console;
  const int fd = connect_loopback(console.server->port());
  const std::string request = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  for (int round = 0; round < 2; ++round) {
    REQUIRE(::send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size()));
    const auto reply = sao_test::read_one_http_reply(fd);
    CHECK(reply.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
    CHECK(reply.find("Keep-Alive: timeout=30, max=1000\r\n") != std::string::npos);
    CHECK(reply.find("Connection: close") == std::string::npos);
  }
  const std::string last = "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  REQUIRE(::send(fd, last.data(), last.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(last.size()));
  CHECK(sao_test::read_one_http_reply(fd).find("Connection: close\r\n") != std::string::npos);
  char byte = 0;
  CHECK(::recv(fd, &byte, 1, 0) == 0);  // the server ended the connection after that reply
  ::close(fd);
}

// Held by events: every trickling connection is accepted and read before
// the normal request is sent, and is still open after it is answered. With
// httplib's accept loop (64 workers) the request waited for as long as the
// trickling lasted: a worker per trickling connection.
TEST_CASE("a request is answered while 200 clients trickle requests, all accepted and still open after it") {
  constexpr int kTrickling = 200;
  sao::actors::ConsoleLimits limits;
  limits.request_timeout_s = 3600;  // the deadline must not end a trickling client during the test
  ConsoleFixture fixture(limits);
  TricklingClients hostile(fixture.server->port(), kTrickling);
  while (fixture.server->connection_stats().reading < kTrickling) std::this_thread::sleep_for(1ms);
  httplib::Client client("127.0.0.1", fixture.server->port());
  client.set_read_timeout(120, 0);  // a hang guard, not a speed requirement
  auto reply = client.Get("/");
  REQUIRE(reply);
  CHECK(reply->status == 200);
  CHECK(reply->body.find("<html") != std::string::npos);
  const auto stats = fixture.server->connection_stats();
  CHECK(stats.reading == kTrickling);
  CHECK(stats.displaced == 0);
  CHECK(stats.timed_out == 0);
  CHECK(hostile.all_open());
}

// Two runs started together, both asking for the default port: the second
// must not share the first one's port (httplib's listener set SO_REUSEPORT,
// so both listened on 8470 and requests went to either run at random).
TEST_CASE("a second console asked for a taken port falls back, says so, and each answers for its own run") {
  ConsoleFixture first;
  caf::actor_system_config second_config;
  sao::actors::register_protocol(second_config);
  caf::actor_system second_system{second_config};
  const fs::path second_dir = first.run_dir.string() + "_second";
  sao::config::ConsoleSection wants_taken_port;
  wants_taken_port.port = first.server->port();
  const fs::path log = first.run_dir.string() + "_stderr.txt";
  std::unique_ptr<sao::actors::ConsoleServer> second;
  {
    std::fflush(stderr);
    const int saved = ::dup(2);
    const int file = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(file, 2);
    second = std::make_unique<sao::actors::ConsoleServer>(second_system, sao::actors::CoordinatorActor{},
                                                          wants_taken_port, second_dir.string());
    std::fflush(stderr);
    ::dup2(saved, 2);
    ::close(saved);
    ::close(file);
  }
  const auto port = std::to_string(first.server->port());
  CHECK(second->port() != first.server->port());
  CHECK(sao_test::read_text(log).find("console: port " + port +
                                      " on 127.0.0.1 is taken (console: cannot "
                                      "listen on 127.0.0.1:" +
                                      port + ": Address already in use); using " + std::to_string(second->port()) +
                                      " instead\n") != std::string::npos);
  CHECK(sao::actors::read_console_endpoint(second_dir.string()).port == second->port());
  CHECK(sao::actors::read_console_endpoint(first.run_dir.string()).port == first.server->port());
  // Each port answers with its own run's token and refuses the other's,
  // every time (a shared port answered 403 to the right token at random).
  for (const auto* server : {first.server.get(), second.get()}) {
    const auto* other = server == first.server.get() ? second.get() : first.server.get();
    httplib::Client client("127.0.0.1", server->port());
    for (int i = 0; i < 8; ++i) {
      auto own =
          client.Post("/api/control", {{"Authorization", "Bearer " + server->token()}}, "{}", "application/json");
      REQUIRE(own);
      CHECK(own->status == 400);  // past the token: the body names no command
      auto wrong =
          client.Post("/api/control", {{"Authorization", "Bearer " + other->token()}}, "{}", "application/json");
      REQUIRE(wrong);
      CHECK(wrong->status == 403);
    }
  }
  second.reset();
  fs::remove_all(second_dir);
  fs::remove(log);
}

// The other port sao listens on for the cluster: the gate in front of the
// gatekeeper (CAF itself listens on a loopback port of its own). The gate
// listens with SO_REUSEADDR only, so a port held by another listener (even
// one that allows SO_REUSEPORT) is refused.
TEST_CASE("the cluster gatekeeper's port is refused, not shared, when another socket listens there") {
  const auto certs = fs::temp_directory_path() / ("sao_console_gate_certs_" + std::to_string(::getpid()));
  fs::remove_all(certs);
  const std::string script = std::string(SAO_SOURCE_DIR) + "/deploy/cluster-certs";
  REQUIRE(std::system((script + " '" + certs.string() + "' learner > /dev/null").c_str()) == 0);
  sao::actors::ClusterTls tls;
  tls.dir = (certs / "learner").string();
  uint16_t port = 0;
  const int other = sao_test::listen_loopback_sharing_port(&port);
  caf::actor_system_config config;
  sao::actors::register_protocol(config);
  sao::actors::enable_cluster_networking(config, tls);
  caf::actor_system system{config};
  auto gatekeeper = sao::actors::spawn_gatekeeper(system, {});
  const auto error =
      sao_test::error_of([&] { sao::actors::publish_gatekeeper(system, gatekeeper, "127.0.0.1", port, tls); });
  INFO(error);
  CHECK(error.rfind("learner node: cannot listen on 127.0.0.1:" + std::to_string(port) + ": ", 0) == 0);
  caf::anon_send_exit(gatekeeper, caf::exit_reason::user_shutdown);
  ::close(other);
  fs::remove_all(certs);
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

TEST_CASE("an endpoint file that is missing, malformed or incomplete is refused, naming the file") {
  const fs::path dir = fs::temp_directory_path() / ("sao_endpoint_files_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto error_of = [](const std::function<void()>& call) -> std::string {
    try {
      call();
    } catch (const sao::Error& error) {
      return error.what();
    }
    return "";
  };
  const auto console = (dir / "console.json").string();
  const auto agent = (dir / "agent.json").string();
  CHECK(error_of([&] { sao::actors::read_console_endpoint(dir.string()); }) ==
        console + ": not found (is a run with console.enabled going in " + dir.string() + "?)");
  CHECK(error_of([&] { sao::actors::read_agent_endpoint(dir.string()); }) ==
        agent + ": not found (is a run with agent.endpoint true going in " + dir.string() + "?)");
  const auto write = [](const std::string& path, const std::string& text) { std::ofstream(path) << text; };
  write(console, "[1, 2]");
  CHECK(error_of([&] { sao::actors::read_console_endpoint(dir.string()); }) == console + ": expected a JSON object");
  write(console, R"({"host": "127.0.0.1", "port": "80", "token": "t"})");
  CHECK(error_of([&] { sao::actors::read_console_endpoint(dir.string()); }) ==
        console + R"(: expected {"url", "host", "port", "token"})");
  write(agent, R"({"url": "http://127.0.0.1:1/v1"})");
  CHECK(error_of([&] { sao::actors::read_agent_endpoint(dir.string()); }) == agent + R"(: expected {"url", "token"})");
  write(agent, "{\"url\": ");
  CHECK(error_of([&] { sao::actors::read_agent_endpoint(dir.string()); }).rfind(agent + ":", 0) == 0);
  write(agent, R"({"url": "http://127.0.0.1:1/v1", "token": "abc"})");
  const auto endpoint = sao::actors::read_agent_endpoint(dir.string());
  CHECK(endpoint.url == "http://127.0.0.1:1/v1");
  CHECK(endpoint.token == "abc");
  fs::remove_all(dir);
}
