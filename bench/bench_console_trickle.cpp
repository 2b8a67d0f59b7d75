// The console under slow clients (issue 47): CONNECTIONS clients each send
// the start of a request and then one more header byte every 2 s, never
// finishing; meanwhile REQUESTS normal requests (GET /, one at a time) are
// timed from connect to the end of the reply. Printed: the latency of the
// normal requests with and without the crowd, how many were answered within
// 30 s, and how many crowd sockets the server still held at the end.
//
// Usage: bench_console_trickle [CONNECTIONS] [REQUESTS] [PORT]
//   (default 500 and 20; without PORT a console runs in this process with
//   the default limits, and its own connection counts are printed too; with
//   PORT the console of a running `sao train` on 127.0.0.1:PORT is used)
#include "actors/console/console_server.hpp"
#include "actors/protocol.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  return fd;
}

// Seconds from connect to the end of a GET / reply; negative when there was
// no complete 200 reply within 30 s.
double timed_request(int port) {
  const auto start = Clock::now();
  const int fd = connect_to(port);
  if (fd < 0) return -1;
  timeval limit{30, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  const std::string request = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  [[maybe_unused]] auto sent = ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string reply;
  char buffer[16384];
  for (ssize_t got; (got = ::recv(fd, buffer, sizeof(buffer), 0)) > 0;) reply.append(buffer, static_cast<size_t>(got));
  ::close(fd);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return reply.rfind("HTTP/1.1 200", 0) == 0 && reply.find("</html>") != std::string::npos ? seconds : -1;
}

void print_latencies(const char* label, std::vector<double> seconds) {
  std::vector<double> answered;
  for (double s : seconds)
    if (s >= 0) answered.push_back(s * 1e3);
  std::sort(answered.begin(), answered.end());
  std::printf("%-34s answered %zu of %zu", label, answered.size(), seconds.size());
  if (!answered.empty()) {
    std::printf("   ms: min %.2f  median %.2f  max %.2f", answered.front(), answered[answered.size() / 2],
                answered.back());
  }
  std::printf("\n");
}

std::vector<double> measure(int port, int requests) {
  std::vector<double> seconds;
  for (int i = 0; i < requests; ++i) seconds.push_back(timed_request(port));
  return seconds;
}

}  // namespace

int main(int argc, char** argv) {
  const int connections = argc > 1 ? std::stoi(argv[1]) : 500;
  const int requests = argc > 2 ? std::stoi(argv[2]) : 20;
  int port = argc > 3 ? std::stoi(argv[3]) : 0;
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;  // the crowd and the server's side of it
  ::setrlimit(RLIMIT_NOFILE, &files);

  caf::actor_system_config config;
  sao::actors::register_protocol(config);
  std::unique_ptr<caf::actor_system> system;
  std::unique_ptr<sao::actors::ConsoleServer> console;
  const auto run_dir = std::filesystem::temp_directory_path() / ("sao_bench_console_" + std::to_string(::getpid()));
  if (port == 0) {
    system = std::make_unique<caf::actor_system>(config);
    sao::config::ConsoleSection section;
    section.port = 0;
    console = std::make_unique<sao::actors::ConsoleServer>(*system, sao::actors::CoordinatorActor{}, section,
                                                           run_dir.string());
    port = console->port();
  }
  std::printf("console on 127.0.0.1:%d (%s); %d trickling connections, 1 byte per 2 s each\n", port,
              console ? "in this process, default limits" : "external", connections);
  print_latencies("GET / alone:", measure(port, requests));

  std::vector<int> crowd;
  const std::string start = "GET /api/actors HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
  for (int i = 0; i < connections; ++i) {
    const int fd = connect_to(port);
    if (fd < 0) break;
    [[maybe_unused]] auto sent = ::send(fd, start.data(), start.size(), MSG_NOSIGNAL);
    crowd.push_back(fd);
  }
  std::atomic<bool> stop{false};
  std::thread trickler([&] {
    while (!stop) {
      for (int fd : crowd) [[maybe_unused]] auto sent = ::send(fd, "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      for (int waited = 0; waited < 20 && !stop; ++waited) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  std::printf("crowd connected: %zu of %d\n", crowd.size(), connections);
  print_latencies("GET / amid the crowd:", measure(port, requests));
  int held = 0;
  for (int fd : crowd) {
    char byte = 0;
    if (::recv(fd, &byte, 1, MSG_DONTWAIT) < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) ++held;
  }
  std::printf("crowd sockets the server still holds open: %d\n", held);
  if (console) {
    const auto stats = console->connection_stats();
    std::printf(
        "server: accepted %lld, open %lld, reading %lld, answered %lld, displaced %lld, refused %lld, "
        "timed out %lld\n",
        static_cast<long long>(stats.accepted), static_cast<long long>(stats.open),
        static_cast<long long>(stats.reading), static_cast<long long>(stats.answered),
        static_cast<long long>(stats.displaced), static_cast<long long>(stats.refused),
        static_cast<long long>(stats.timed_out));
  }
  stop = true;
  trickler.join();
  for (int fd : crowd) ::close(fd);
  console.reset();
  std::filesystem::remove_all(run_dir);
  return 0;
}
