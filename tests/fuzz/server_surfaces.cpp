// Fuzz surfaces against live servers, each run in its own child: the
// console (raw requests, trickling clients), the bulk weight server, the
// cluster gatekeeper, the learner's TLS port and descriptor floods; see
// sao_fuzz.cpp.
#include "fuzz_harness.hpp"

namespace sao_fuzz {

// ---- surfaces against a live server (the server runs in its own child) -----

struct HttpServer {
  pid_t pid = -1;
  int port = 0;
  std::string token;
};

HttpServer start_console(const fs::path& scratch) {
  const auto endpoint = scratch / "run" / "console.json";
  fs::remove_all(scratch / "run");
  std::fflush(nullptr);
  HttpServer server;
  server.pid = ::fork();
  if (server.pid == 0) {
    quiet();
    caf::actor_system_config config;
    sao::actors::register_protocol(config);
    caf::actor_system system{config};
    sao::config::ConsoleSection section;
    section.port = 0;
    // A short request deadline: a truncated request then costs a second, not ten.
    sao::actors::ConsoleLimits limits;
    limits.request_timeout_s = 1;
    limits.write_timeout_s = 1;
    sao::actors::ConsoleServer console(system, sao::actors::CoordinatorActor{}, section, (scratch / "run").string(),
                                       limits);
    for (;;) ::pause();
  }
  for (int i = 0; i < 6000 && !fs::exists(endpoint); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the file is written whole by then
  std::ifstream in(endpoint);
  const auto json = nlohmann::json::parse(in);
  server.port = json["port"].get<int>();
  server.token = json["token"].get<std::string>();
  return server;
}

// A connection to 127.0.0.1:port, or -1.
int loopback_connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// True once `reply` holds a whole HTTP reply framed by Content-Length (the
// front keeps connections alive, so a client stops reading there).
bool reply_complete(const std::string& reply) {
  const auto head_end = reply.find("\r\n\r\n");
  if (head_end == std::string::npos) return false;
  const auto at = reply.find("Content-Length: ");
  if (at == std::string::npos || at > head_end) return false;
  const auto length = std::strtoull(reply.c_str() + at + 16, nullptr, 10);
  return reply.size() >= head_end + 4 + length;
}

// Sends `request` and reads until a whole reply came, the server closes or
// `wait` passes.
// Returns false if the connection could not be made.
// `half_close`: end the request stream after sending (a truncated request
// then fails at once instead of waiting for the server's read timeout).
bool exchange(int port, const std::string& request, std::chrono::seconds wait, std::string* reply,
              bool half_close = true) {
  const int fd = loopback_connect(port);
  if (fd < 0) return false;
  timeval timeout{static_cast<time_t>(wait.count()), 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  [[maybe_unused]] auto sent = ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  if (half_close) ::shutdown(fd, SHUT_WR);
  char buffer[4096];
  for (ssize_t n; !reply_complete(*reply) && (n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0;) {
    reply->append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return true;
}

// Cases first..last-1 (mutations of `seeds`, reproducible from `seed` and
// the case number), each sent on its own connection, all at once; returns
// the replies in case order and the inputs through `inputs`.
std::vector<std::string> exchange_batch(int port, const std::vector<std::string>& seeds, uint64_t seed, int64_t first,
                                        int64_t last, std::vector<std::string>* inputs, bool half_close) {
  for (int64_t i = first; i < last; ++i) {
    std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(i));
    inputs->push_back(mutate(seeds[rng() % seeds.size()], rng));
  }
  std::vector<std::string> replies(inputs->size());
  std::vector<std::thread> clients;
  for (size_t k = 0; k < inputs->size(); ++k) {
    clients.emplace_back([&, k] { exchange(port, (*inputs)[k], std::chrono::seconds(10), &replies[k], half_close); });
  }
  for (auto& client : clients) client.join();
  return replies;
}

Counts fuzz_http(int64_t cases, uint64_t seed, const fs::path& scratch, const fs::path& out) {
  Counts counts;
  auto server = start_console(scratch);
  const std::string body = R"({"command":"set","key":"min_batch","value":8})";
  const std::vector<std::string> seeds = {
      "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
      "GET /api/metrics?since=12 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
      "POST /api/control HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + server.token +
          "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body,
      "POST /api/control HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}",
      "GET /api/knobs HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"};
  for (const auto& request : seeds) {  // each seed is answered: the cases start from requests that work
    std::string reply;
    exchange(server.port, request, std::chrono::seconds(30), &reply, /*half_close=*/false);
    if (reply.rfind("HTTP/1.1 ", 0) != 0) throw sao::Error("http: a seed request got no reply");
  }
  // Cases go in batches of concurrent connections (the server has 64
  // workers); after each batch the server must be alive and answer.
  constexpr int64_t kBatch = 16;
  for (int64_t first = 0; first < cases; first += kBatch) {
    const int64_t last = std::min(cases, first + kBatch);
    std::vector<std::string> inputs;
    const auto replies = exchange_batch(server.port, seeds, seed, first, last, &inputs, /*half_close=*/false);
    int status = 0;
    bool failed = false;
    Outcome failure = Outcome::kCrash;
    if (::waitpid(server.pid, &status, WNOHANG) == server.pid) {
      failed = true;
    } else {
      std::string health;
      if (!exchange(server.port, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", std::chrono::seconds(30),
                    &health, /*half_close=*/false) ||
          health.rfind("HTTP/1.1 200", 0) != 0) {
        failed = true;
        failure = Outcome::kHang;
      }
    }
    if (failed) {
      ++counts.by_outcome[failure];  // one failure for the batch; every input of it is kept
      for (size_t k = 0; k < inputs.size(); ++k) keep(out, "http", first + static_cast<int64_t>(k), inputs[k]);
      ::kill(server.pid, SIGKILL);
      ::waitpid(server.pid, nullptr, 0);
      server = start_console(scratch);
      continue;
    }
    for (const auto& reply : replies)
      ++counts.by_outcome[reply.rfind("HTTP/1.1 2", 0) == 0 ? Outcome::kAccepted : Outcome::kClean];
  }
  ::kill(server.pid, SIGKILL);
  ::waitpid(server.pid, nullptr, 0);
  return counts;
}

// Slow and greedy clients against the console's event front: each case
// holds a random crowd of connections (trickling partial headers, oversized
// headers, idle sockets by the hundred from one address, mutated requests
// sent in part), and a normal request sent meanwhile must get its 200 while
// the crowd keeps trickling. Unanswered in 30 s: a hang; the server gone: a crash.
// Sends the normal request and, until its reply is whole, one more byte on
// every crowd socket each 5 ms. True when the reply is a 200.
bool answered_amid(int port, const std::vector<int>& crowd, std::mt19937_64& rng) {
  const int fd = loopback_connect(port);
  if (fd < 0) return false;
  const std::string request = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  [[maybe_unused]] auto sent = ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  timeval tick{0, 5000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tick, sizeof(tick));
  std::string reply;
  char buffer[4096];
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < give_up) {
    const ssize_t got = ::recv(fd, buffer, sizeof(buffer), 0);
    if (got > 0) {
      reply.append(buffer, static_cast<size_t>(got));
      if (reply_complete(reply)) break;
      continue;
    }
    if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) break;
    const char byte = static_cast<char>('a' + rng() % 26);
    for (int other : crowd) [[maybe_unused]] auto more = ::send(other, &byte, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  ::close(fd);
  return reply.rfind("HTTP/1.1 200", 0) == 0;
}

Counts fuzz_console_trickle(int64_t cases, uint64_t seed, const fs::path& scratch, const fs::path& out) {
  Counts counts;
  auto server = start_console(scratch);
  const std::vector<std::string> seeds = {
      "GET /api/actors HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ",
      "POST /api/control HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 40\r\n\r\n{\"command\":",
      "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"};
  for (int64_t i = 0; i < cases; ++i) {
    std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(i));
    std::vector<int> crowd;
    std::string described;  // what the case did, kept with a failure
    const int kind = static_cast<int>(rng() % 4);
    const size_t size = kind == 2 ? 200 + rng() % 400 : kind == 1 ? 1 + rng() % 8 : 1 + rng() % 300;
    for (size_t k = 0; k < size; ++k) {
      const int fd = loopback_connect(server.port);
      if (fd < 0) break;
      crowd.push_back(fd);
      std::string first;
      if (kind == 0) {  // partial headers, to be trickled
        first = seeds[0].substr(0, 1 + rng() % seeds[0].size());
      } else if (kind == 1) {  // oversized headers, ended or not
        first = "GET / HTTP/1.1\r\nX-Big: " + std::string(16 * 1024 + rng() % (200 * 1024), 'b') +
                (rng() % 2 ? "\r\n\r\n" : "");
      } else if (kind == 3) {  // a mutated request, cut anywhere
        const auto mutated = mutate(seeds[rng() % seeds.size()], rng);
        first = mutated.substr(0, rng() % (mutated.size() + 1));
      }  // kind 2: idle sockets, many from one address
      if (!first.empty()) [[maybe_unused]]
        auto sent = ::send(fd, first.data(), first.size(), MSG_NOSIGNAL);
      if (k == 0) described = "kind " + std::to_string(kind) + ", first connection sent:\n" + first;
    }
    const bool answered = answered_amid(server.port, crowd, rng);
    for (int fd : crowd) ::close(fd);
    if (answered) {
      ++counts.by_outcome[Outcome::kAccepted];
      continue;
    }
    const bool alive = ::waitpid(server.pid, nullptr, WNOHANG) == 0;
    ++counts.by_outcome[alive ? Outcome::kHang : Outcome::kCrash];
    keep(out, "console_trickle", i, std::to_string(crowd.size()) + " connections, " + described);
    ::kill(server.pid, SIGKILL);
    ::waitpid(server.pid, nullptr, 0);
    server = start_console(scratch);
  }
  ::kill(server.pid, SIGKILL);
  ::waitpid(server.pid, nullptr, 0);
  return counts;
}

// The bulk weight server: it runs in a child (a crash is seen as its exit),
// serving one version; each case is a mutated request on its own
// connection, in batches of 16 at once; after each batch a real client
// must still read the version byte for byte.
Counts fuzz_bulk(int64_t cases, uint64_t seed, const fs::path& out) {
  Counts counts;
  constexpr uint64_t kBytes = 1 << 16;
  const std::string secret = "fuzz-secret";
  const auto start_server = [&](int* port) {
    int pipe_fds[2];
    if (::pipe(pipe_fds) != 0) throw sao::Error("pipe failed");
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      quiet();
      ::close(pipe_fds[0]);
      sao::net::BulkServer server("127.0.0.1", 0, secret);
      auto bytes = std::make_shared<std::vector<char>>(kBytes, 'w');
      server.publish(1, bytes->data(), bytes->size(), bytes);
      const int bound = server.port();
      if (::write(pipe_fds[1], &bound, sizeof(bound)) != sizeof(bound)) std::_Exit(1);
      for (;;) ::pause();
    }
    ::close(pipe_fds[1]);
    if (::read(pipe_fds[0], port, sizeof(*port)) != sizeof(*port)) throw sao::Error("bulk: the server did not start");
    ::close(pipe_fds[0]);
    return pid;
  };
  const auto request = [&](int64_t version, uint64_t size, const std::string& key) {
    std::string text(sao::net::kBulkMagic, sizeof(sao::net::kBulkMagic));
    text.append(reinterpret_cast<const char*>(&version), sizeof(version));
    text.append(reinterpret_cast<const char*>(&size), sizeof(size));
    const auto length = static_cast<uint32_t>(key.size());
    text.append(reinterpret_cast<const char*>(&length), sizeof(length));
    return text + key;
  };
  // A good request, one for a version not held, and two in one stream.
  const std::vector<std::string> seeds = {request(1, kBytes, secret), request(2, kBytes, secret),
                                          request(2, kBytes, secret) + request(1, kBytes, secret)};
  int port = 0;
  pid_t pid = start_server(&port);
  const auto healthy = [&] {
    try {
      sao::net::BulkClient client("127.0.0.1", static_cast<uint16_t>(port), secret, 30000);
      std::vector<char> into;
      return client.fetch(1, kBytes, into) == sao::net::BulkStatus::kOk && into == std::vector<char>(kBytes, 'w');
    } catch (const sao::Error&) {
      return false;
    }
  };
  if (!healthy()) throw sao::Error("bulk: the seed request failed");
  constexpr int64_t kBatch = 16;
  for (int64_t first = 0; first < cases; first += kBatch) {
    const int64_t last = std::min(cases, first + kBatch);
    std::vector<std::string> inputs;
    const auto replies = exchange_batch(port, seeds, seed, first, last, &inputs, /*half_close=*/true);
    Outcome failure = Outcome::kHang;
    bool failed = false;
    if (::waitpid(pid, nullptr, WNOHANG) == pid) {
      failed = true;
      failure = Outcome::kCrash;
    } else if (!healthy()) {
      failed = true;
    }
    if (failed) {
      ++counts.by_outcome[failure];
      for (size_t k = 0; k < inputs.size(); ++k) keep(out, "bulk", first + static_cast<int64_t>(k), inputs[k]);
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      pid = start_server(&port);
      continue;
    }
    for (const auto& reply : replies) {
      // Status 0 (the bytes follow) is "accepted"; a refusal or a close is clean.
      const bool served = reply.size() >= 12 && reply.compare(0, 8, "SAOBULK1") == 0 && reply[8] == 0 &&
                          reply[9] == 0 && reply[10] == 0 && reply[11] == 0;
      ++counts.by_outcome[served ? Outcome::kAccepted : Outcome::kClean];
    }
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return counts;
}

// The gatekeeper's join: each case mutates the four strings of a valid
// request and sends it in-process; one child serves a batch of cases.
Counts fuzz_join(int64_t cases, uint64_t seed, const fs::path& out) {
  Counts counts;
  const auto fingerprint = sao::actors::message_set_fingerprint();
  const std::vector<std::string> valid = {"node-1", "rollout", fingerprint, "fuzz-secret"};
  const int64_t batch = 50;
  for (int64_t first = 0; first < cases; first += batch) {
    const int64_t last = std::min(cases, first + batch);
    int pipe_fds[2];
    if (::pipe(pipe_fds) != 0) throw sao::Error("pipe failed");
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      quiet();
      ::close(pipe_fds[0]);
      ::alarm(static_cast<unsigned>(120 + (last - first) * 2));
      caf::actor_system_config config;
      sao::actors::register_protocol(config);
      caf::actor_system system{config};
      sao::actors::GatekeeperConfig gatekeeper_config;
      gatekeeper_config.secret = "fuzz-secret";
      gatekeeper_config.fingerprint = fingerprint;
      gatekeeper_config.run_config_json = "{}";
      auto gatekeeper = sao::actors::spawn_gatekeeper(system, gatekeeper_config);
      caf::scoped_actor self{system};
      // Stands in for the coordinator: no node holds any name.
      auto stand_in = system.spawn(
          []() -> caf::behavior { return {[](sao::atoms::join_atom, const std::string&) { return caf::node_id{}; }}; });
      self->send(gatekeeper, sao::atoms::start_atom_v, stand_in, stand_in, stand_in);
      for (int64_t i = first; i < last; ++i) {
        std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(i));
        auto fields = valid;
        const int touched = 1 + static_cast<int>(rng() % 4);
        for (int t = 0; t < touched; ++t) {
          auto& field = fields[rng() % fields.size()];
          field = mutate(field, rng);
        }
        char outcome = static_cast<char>(Outcome::kHang);
        self->request(gatekeeper, std::chrono::seconds(60), sao::atoms::join_atom_v, fields[0], fields[1], fields[2],
                      fields[3])
            .receive([&](const std::string&, int64_t, const caf::actor&, const caf::actor&,
                         const caf::actor&) { outcome = static_cast<char>(Outcome::kAccepted); },
                     [&](const caf::error& error) {
                       outcome =
                           static_cast<char>(error == caf::sec::request_timeout ? Outcome::kHang : Outcome::kClean);
                     });
        [[maybe_unused]] auto written = ::write(pipe_fds[1], &outcome, 1);
      }
      self->send_exit(gatekeeper, caf::exit_reason::user_shutdown);
      self->send_exit(stand_in, caf::exit_reason::user_shutdown);
      ::_exit(0);
    }
    ::close(pipe_fds[1]);
    int64_t reported = 0;
    for (char outcome; ::read(pipe_fds[0], &outcome, 1) == 1; ++reported) {
      ++counts.by_outcome[static_cast<Outcome>(outcome)];
    }
    ::close(pipe_fds[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    // Cases the child never reported: it died (or hung) on the next one.
    if (reported < last - first) {
      const bool hung = WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM;
      ++counts.by_outcome[hung ? Outcome::kHang : Outcome::kCrash];
      keep(out, "join", first + reported,
           "case " + std::to_string(first + reported) + " of seed " + std::to_string(seed));
    }
  }
  return counts;
}

// A cluster CA under `dir` with a learner's and a node's certificate directory.
std::pair<sao::actors::ClusterTls, sao::actors::ClusterTls> make_fuzz_cluster_certs(const fs::path& dir,
                                                                                    const std::string& surface) {
  const std::string command =
      std::string(SAO_SOURCE_DIR) + "/deploy/cluster-certs '" + dir.string() + "' learner node > /dev/null";
  if (std::system(command.c_str()) != 0) throw sao::Error(surface + ": deploy/cluster-certs failed");
  return {sao::actors::ClusterTls{(dir / "learner").string()}, sao::actors::ClusterTls{(dir / "node").string()}};
}

// Raw bytes to a learner's TLS port, as a stranger without a certificate
// would send them: BASP headers (the one that crashed CAF 0.17.6's parser,
// one claiming a 1 GiB payload), the start of a TLS ClientHello, garbage. The
// server runs in a child; after each batch it must be alive and still
// complete a mutually authenticated handshake.
Counts fuzz_tls_frames(int64_t cases, uint64_t seed, const fs::path& scratch, const fs::path& out) {
  Counts counts;
  const auto certs = make_fuzz_cluster_certs(scratch / "certs", "tls_frames");
  const auto& server_tls = certs.first;
  const auto& client_tls = certs.second;
  const auto port_file = scratch / "tls_port";
  auto start_server = [&]() -> pid_t {
    fs::remove(port_file);
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      quiet();
      caf::actor_system_config config;
      sao::actors::register_protocol(config);
      sao::actors::enable_cluster_networking(config, server_tls);
      caf::actor_system system{config};
      sao::actors::GatekeeperConfig gatekeeper_config;
      gatekeeper_config.secret = "fuzz-secret";
      gatekeeper_config.fingerprint = sao::actors::message_set_fingerprint();
      auto gatekeeper = sao::actors::spawn_gatekeeper(system, gatekeeper_config);
      const auto cluster_port = sao::actors::publish_gatekeeper(system, gatekeeper, "127.0.0.1", 0, server_tls);
      std::ofstream(port_file.string() + ".tmp") << cluster_port->port();
      fs::rename(port_file.string() + ".tmp", port_file);
      for (;;) ::pause();
    }
    for (int i = 0; i < 6000 && !fs::exists(port_file); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return pid;
  };
  pid_t server = start_server();
  auto port_of = [&] {
    std::ifstream in(port_file);
    int port = 0;
    in >> port;
    return port;
  };
  int port = port_of();
  std::string crash_header(32, '\0');
  crash_header[15] = 1;  // operation 0, payload 0, operation data 1
  std::string big_header(32, '\0');
  big_header[4] = 0x40;  // payload length 1 GiB
  const std::vector<std::string> seeds = {
      crash_header, big_header, std::string("\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03", 11), std::string(64, 'x')};
  constexpr int64_t kBatch = 16;
  for (int64_t first = 0; first < cases; first += kBatch) {
    const int64_t last = std::min(cases, first + kBatch);
    std::vector<std::string> inputs;
    for (int64_t i = first; i < last; ++i) {
      std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(i));
      inputs.push_back(mutate(seeds[rng() % seeds.size()], rng));
    }
    std::vector<std::thread> clients;
    for (const auto& input : inputs) {
      clients.emplace_back([&, input] {
        std::string ignored;
        exchange(port, input, std::chrono::seconds(5), &ignored, /*half_close=*/true);
      });
    }
    for (auto& client : clients) client.join();
    int status = 0;
    Outcome failure = Outcome::kClean;
    if (::waitpid(server, &status, WNOHANG) == server) {
      failure = Outcome::kCrash;
    } else if (!sao::actors::tls_handshake_problem("127.0.0.1", static_cast<uint16_t>(port), client_tls).empty()) {
      failure = Outcome::kHang;  // alive, but no longer completes a good handshake
    }
    if (failure != Outcome::kClean) {
      ++counts.by_outcome[failure];
      for (size_t k = 0; k < inputs.size(); ++k) keep(out, "tls_frames", first + static_cast<int64_t>(k), inputs[k]);
      ::kill(server, SIGKILL);
      ::waitpid(server, nullptr, 0);
      server = start_server();
      port = port_of();
      continue;
    }
    counts.by_outcome[Outcome::kClean] += last - first;  // dropped by the TLS layer
  }
  ::kill(server, SIGKILL);
  ::waitpid(server, nullptr, 0);
  return counts;
}

// Floods of idle, half-open, slow and garbage connections at a learner's
// cluster (CAF, behind the gate) and bulk ports, held open while a node with
// the cluster's certificate joins and fetches a weight version: both must
// succeed whatever the flood (issue 47: 1,200 idle connections once took the
// learner to its descriptor limit). The server runs in a child with a limit
// of 1,024 descriptors; a case whose flood cannot be answered is a hang, a
// dead child a crash.
Counts fuzz_descriptor_flood(int64_t cases, uint64_t seed, const fs::path& scratch, const fs::path& out) {
  Counts counts;
  const auto certs = make_fuzz_cluster_certs(scratch / "flood_certs", "descriptor_flood");
  const auto& server_tls = certs.first;
  const auto& client_tls = certs.second;
  const auto ports_file = scratch / "flood_ports";
  constexpr uint64_t kWeightBytes = 4096;
  auto start_server = [&](int* cluster_port, int* bulk_port) -> pid_t {
    fs::remove(ports_file);
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      quiet();
      rlimit limit{1024, 1024};
      ::setrlimit(RLIMIT_NOFILE, &limit);
      caf::actor_system_config config;
      sao::actors::register_protocol(config);
      sao::actors::enable_cluster_networking(config, server_tls);
      caf::actor_system system{config};
      auto gatekeeper = sao::actors::spawn_gatekeeper(
          system, sao::actors::GatekeeperConfig{"fuzz-secret", sao::actors::message_set_fingerprint(), "{}", ""});
      // Stands in for the coordinator: no node holds any name.
      auto stand_in = system.spawn(
          []() -> caf::behavior { return {[](sao::atoms::join_atom, const std::string&) { return caf::node_id{}; }}; });
      caf::anon_send(gatekeeper, sao::atoms::start_atom_v, stand_in, stand_in, stand_in);
      const auto gate = sao::actors::publish_gatekeeper(system, gatekeeper, "127.0.0.1", 0, server_tls);
      sao::net::BulkServer bulk("127.0.0.1", 0, "fuzz-secret", 2, server_tls.files());
      auto weights = std::make_shared<std::vector<char>>(kWeightBytes, 'w');
      bulk.publish(1, weights->data(), weights->size(), weights);
      std::ofstream(ports_file.string() + ".tmp") << gate->port() << " " << bulk.port();
      fs::rename(ports_file.string() + ".tmp", ports_file);
      for (;;) ::pause();
    }
    for (int i = 0; i < 6000 && !fs::exists(ports_file); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::ifstream in(ports_file);
    in >> *cluster_port >> *bulk_port;
    return pid;
  };
  int cluster_port = 0;
  int bulk_port = 0;
  pid_t server = start_server(&cluster_port, &bulk_port);
  const std::string hello_start("\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03", 11);
  std::string basp_header(32, '\0');
  basp_header[15] = 1;
  for (int64_t i = 0; i < cases; ++i) {
    std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(i));
    const int connections = 1 + static_cast<int>(rng() % 400);
    std::string description = "case " + std::to_string(i) + " of seed " + std::to_string(seed) + ":";
    std::vector<int> flood;
    for (int c = 0; c < connections; ++c) {
      const bool at_bulk = rng() % 2 == 0;
      const int kind = static_cast<int>(rng() % 4);  // idle, half-open, slow (part of a ClientHello), garbage
      std::string problem;
      const int fd = sao::base::connect_tcp("127.0.0.1", static_cast<uint16_t>(at_bulk ? bulk_port : cluster_port),
                                            5000, &problem);
      if (fd < 0) continue;  // the backlog was full: the flood is as big as the kernel lets it be
      if (kind == 1) ::shutdown(fd, SHUT_WR);
      if (kind == 2) {
        [[maybe_unused]] auto sent = ::send(fd, hello_start.data(), 1 + rng() % hello_start.size(), MSG_NOSIGNAL);
      }
      if (kind == 3) {
        const auto bytes = mutate(basp_header, rng);
        [[maybe_unused]] auto sent = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      }
      description += std::string(" ") + (at_bulk ? "bulk:" : "caf:") + std::to_string(kind);
      flood.push_back(fd);
    }
    // The authorised requests, with the flood still held.
    bool joined = false;
    bool fetched = false;
    {
      caf::actor_system_config config;
      sao::actors::register_protocol(config);
      sao::actors::enable_cluster_networking(config, client_tls);
      caf::actor_system system{config};  // fresh per case: CAF would reuse a cached connection
      const sao::actors::JoinRequest request{"node-" + std::to_string(i), "rollout",
                                             sao::actors::message_set_fingerprint(), "fuzz-secret"};
      joined =
          sao::actors::join_learner(system, "127.0.0.1", static_cast<uint16_t>(cluster_port), request, client_tls).ok;
    }
    try {
      sao::net::BulkClient client("127.0.0.1", static_cast<uint16_t>(bulk_port), "fuzz-secret", 10000,
                                  client_tls.files());
      std::vector<char> into;
      fetched = client.fetch(1, kWeightBytes, into) == sao::net::BulkStatus::kOk &&
                into == std::vector<char>(kWeightBytes, 'w');
    } catch (const sao::Error&) {
      fetched = false;
    }
    for (int fd : flood) ::close(fd);
    if (joined && fetched) {
      ++counts.by_outcome[Outcome::kAccepted];
      continue;
    }
    const bool died = ::waitpid(server, nullptr, WNOHANG) == server;
    ++counts.by_outcome[died ? Outcome::kCrash : Outcome::kHang];
    keep(out, "descriptor_flood", i,
         description + (joined ? "" : " (join failed)") + (fetched ? "" : " (fetch failed)"));
    ::kill(server, SIGKILL);
    ::waitpid(server, nullptr, 0);
    server = start_server(&cluster_port, &bulk_port);
  }
  ::kill(server, SIGKILL);
  ::waitpid(server, nullptr, 0);
  return counts;
}

}  // namespace sao_fuzz
