// The encrypted cluster: certificates from deploy/cluster-certs, a learner
// that speaks only TLS, and what must not get through it. A raw BASP header
// sent before any handshake (one crashed the learner with SIGSEGV, one
// claiming a 1 GiB payload made it allocate that) reaches nothing; a node
// whose certificate comes from another CA is refused with a message that
// says so and does not retry; a node with the right certificate joins,
// takes its weights through the TLS bulk channel, and the run finishes its
// budget; a flood of idle connections at both ports holds no more than the
// gate allows, so a node still joins and a stop still ends the run with its
// final checkpoint; and a node without certificates is refused at start,
// on loopback too.
#include "test_process_helpers.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;

namespace {

const std::string kCerts = std::string(SAO_SOURCE_DIR) + "/deploy/cluster-certs";

const char* kTinyRun =
    " --set model.hidden_size=32 --set model.intermediate_size=64 --set model.num_hidden_layers=1"
    " --set model.num_attention_heads=2 --set model.num_key_value_heads=1 --set model.max_position_embeddings=32"
    " --set task.max_digits=1 --set task.test_size=8 --set sft.steps=20 --set sft.batch_size=16"
    " --set sft.log_every=1000 --set eval.max_new_tokens=4 --set rollout.max_new_tokens=4"
    " --set rollout.slots=8 --set train.eval_every=0 --set console.enabled=false";

using sao_test::shell;

std::string read_file(const fs::path& path) {
  return sao_test::read_text(path);
}

// Starts `command` with its output in `log` (after `shell_setup`, e.g. a
// ulimit); returns the pid.
pid_t start(const std::string& command, const fs::path& log, const std::string& shell_setup = "") {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const std::string line = shell_setup + "exec " + command + " > '" + log.string() + "' 2>&1";
    ::execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

int wait_exit(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Sends raw bytes to 127.0.0.1:port and closes, as an attacker without a
// certificate would.
void send_raw(int port, const std::string& bytes) {
  const int fd = sao_test::connect_loopback(port);
  [[maybe_unused]] auto sent = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  char buffer[256];
  timeval wait{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
  [[maybe_unused]] auto got = ::recv(fd, buffer, sizeof(buffer), 0);  // whatever the server answers, or EOF
  ::close(fd);
}

// A BASP header as CAF 0.17 lays it out: operation, 2 padding bytes, flags,
// payload length (big endian), operation data, source and destination ids.
std::string basp_header(uint8_t operation, uint32_t payload_length, uint64_t operation_data) {
  std::string header(32, '\0');
  header[0] = static_cast<char>(operation);
  for (int i = 0; i < 4; ++i) header[4 + i] = static_cast<char>((payload_length >> (24 - 8 * i)) & 0xff);
  for (int i = 0; i < 8; ++i) header[8 + i] = static_cast<char>((operation_data >> (56 - 8 * i)) & 0xff);
  return header;
}

struct TlsCluster {
  fs::path dir = fs::temp_directory_path() / ("sao_cluster_tls_" + std::to_string(::getpid()));
  fs::path secret = dir / "secret";
  TlsCluster() {
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(secret) << "tls-test-secret\n";
    REQUIRE(shell(kCerts + " '" + (dir / "certs").string() + "' learner node-1 > /dev/null") == 0);
    REQUIRE(shell(kCerts + " '" + (dir / "rogue").string() + "' node-1 > /dev/null") == 0);
  }
  ~TlsCluster() { fs::remove_all(dir); }
  std::string node(const std::string& role, const std::string& certs) const {
    return std::string(SAO_BINARY) + " node --role " + role + " --secret-file '" + secret.string() + "'" +
           (certs.empty() ? std::string() : " --certs '" + certs + "'");
  }
};

}  // namespace

TEST_CASE("TLS cluster: raw frames reach nothing, another CA is refused, the right certificate joins") {
  TlsCluster cluster;
  const auto port_file = cluster.dir / "port";
  const pid_t learner = start(cluster.node("learner", (cluster.dir / "certs" / "learner").string()) +
                                  " --listen 127.0.0.1:0 --port-file '" + port_file.string() + "' --run-dir '" +
                                  (cluster.dir / "run").string() + "' --steps 3" + kTinyRun,
                              cluster.dir / "learner.log");
  // The learner writes the port once it listens (after its SFT warm start).
  while (read_file(port_file).empty()) {
    int status = 0;
    REQUIRE_MESSAGE(::waitpid(learner, &status, WNOHANG) == 0, read_file(cluster.dir / "learner.log"));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const int port = std::stoi(read_file(port_file));

  // Before any handshake: the header that crashed CAF 0.17.6's BASP parser,
  // one claiming a 1 GiB payload, and garbage. TLS reads them as a broken
  // ClientHello and drops the connection.
  send_raw(port, basp_header(0, 0, 1));
  send_raw(port, basp_header(0, 1u << 30, 1));
  send_raw(port, std::string(4096, 'x'));

  // A node with a certificate from another CA.
  const auto rogue = shell(cluster.node("rollout", (cluster.dir / "rogue" / "node-1").string()) +
                           " --join 127.0.0.1:" + std::to_string(port) + " --name rogue > '" +
                           (cluster.dir / "rogue.log").string() + "' 2>&1");
  const auto rogue_log = read_file(cluster.dir / "rogue.log");
  INFO(rogue_log);
  CHECK(rogue == 2);  // refused: no retry loop
  CHECK(rogue_log.find("not signed by") != std::string::npos);

  // The learner survived all of it: a node with the right certificate joins
  // and the run reaches its budget.
  const pid_t node = start(cluster.node("rollout", (cluster.dir / "certs" / "node-1").string()) +
                               " --join 127.0.0.1:" + std::to_string(port) + " --name node-1",
                           cluster.dir / "node.log");
  const int learner_exit = wait_exit(learner);
  ::kill(node, SIGTERM);
  wait_exit(node);
  const auto learner_log = read_file(cluster.dir / "learner.log");
  INFO(learner_log);
  INFO(read_file(cluster.dir / "node.log"));
  CHECK(learner_exit == 0);
  CHECK(learner_log.find("after 3 learner steps") != std::string::npos);
  // Its weights went beside CAF, through the bulk channel, over TLS too.
  CHECK(learner_log.find("weights for other processes on bulk port") != std::string::npos);
  CHECK(learner_log.find("(TLS)") != std::string::npos);
  CHECK(learner_log.find("node-1/rollout-0 (cpu) receives weights by bulk_channel") != std::string::npos);
  CHECK(learner_log.find("could not read from the bulk channel") == std::string::npos);
}

// Waits until `text` is in the learner's log; fails if the learner exits first.
void await_log(pid_t learner, const fs::path& log, const std::string& text) {
  while (read_file(log).find(text) == std::string::npos) {
    int status = 0;
    REQUIRE_MESSAGE(::waitpid(learner, &status, WNOHANG) == 0, read_file(log));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// Idle TCP connections to 127.0.0.1:port, as a stranger holds them.
std::vector<int> hold_connections(int port, int count) {
  std::vector<int> held;
  for (int i = 0; i < count; ++i) held.push_back(sao_test::connect_loopback(port));
  return held;
}

TEST_CASE("a flood of idle connections at both ports: a node still joins, stop still checkpoints and exits") {
  TlsCluster cluster;
  // This process holds 2,400 connections; the learner gets a limit of 1,024
  // descriptors (soft and hard), which 1,200 idle plaintext connections once
  // exhausted, so that its checkpoint failed with "Too many open files".
  rlimit limit{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &limit) == 0);
  limit.rlim_cur = limit.rlim_max;
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &limit) == 0);
  REQUIRE(limit.rlim_cur > 2600);
  const auto port_file = cluster.dir / "port";
  const auto log = cluster.dir / "learner.log";
  const auto run_dir = cluster.dir / "run";
  const pid_t learner = start(cluster.node("learner", (cluster.dir / "certs" / "learner").string()) +
                                  " --listen 127.0.0.1:0 --port-file '" + port_file.string() + "' --run-dir '" +
                                  run_dir.string() + "' --steps 1000000" + kTinyRun,
                              log, "ulimit -n 1024 && ");
  await_log(learner, log, "learner node: weights for other processes on bulk port ");
  while (read_file(port_file).empty()) await_log(learner, log, "learner node: listening on");
  const int port = std::stoi(read_file(port_file));
  const auto bulk_at = read_file(log).find("bulk port ") + std::string("bulk port ").size();
  const int bulk_port = std::stoi(read_file(log).substr(bulk_at));

  // More idle connections than the learner has descriptors, at each port,
  // some with the first bytes of a ClientHello that never finishes.
  auto held = hold_connections(port, 1200);
  auto held_bulk = hold_connections(bulk_port, 1200);
  const std::string partial_hello("\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03", 11);
  for (size_t i = 0; i < held.size(); i += 10) {
    [[maybe_unused]] auto sent = ::send(held[i], partial_hello.data(), partial_hello.size(), MSG_NOSIGNAL);
  }

  // A node with the cluster's certificate joins and its rollouts feed the
  // learner, weights through the bulk port included.
  const pid_t node = start(cluster.node("rollout", (cluster.dir / "certs" / "node-1").string()) +
                               " --join 127.0.0.1:" + std::to_string(port) + " --name node-1",
                           cluster.dir / "node.log");
  await_log(learner, log, "gatekeeper: node 'node-1' joined as rollout node #1");
  await_log(learner, log, "node-1/rollout-0 (cpu) receives weights by bulk_channel");
  while (true) {
    const auto status = nlohmann::json::parse(read_file(run_dir / "cluster_status.json"), nullptr, false);
    if (status.is_object() && status.contains("coordinator") && status["coordinator"].value("steps", 0.0) >= 3) break;
    await_log(learner, log, "learner node: listening on");  // fails the test if the learner has exited
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }

  // Once the learner has accepted the whole flood, all but the newest 16
  // pending from this address (the per-address bound) are closed to make room.
  const auto closed_by_learner = [](const std::vector<int>& fds) {
    int closed = 0;
    for (int fd : fds) {
      char byte = 0;
      if (::recv(fd, &byte, 1, MSG_DONTWAIT) == 0) ++closed;
    }
    return closed;
  };
  // Waited for as an event: under a sanitizer the learner may still be
  // accepting the flood when the node's join is logged (1,136 of 1,184 were
  // closed at that moment under ASan); the loop only guards against a hang.
  for (int i = 0; i < 1200 && (closed_by_learner(held) < 1200 - 16 || closed_by_learner(held_bulk) < 1200 - 16); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(closed_by_learner(held) >= 1200 - 16);
  CHECK(closed_by_learner(held_bulk) >= 1200 - 16);

  // Stop while the flood is still held: the final checkpoint and the summary
  // are written and the learner exits.
  REQUIRE(::kill(learner, SIGTERM) == 0);
  const int learner_exit = wait_exit(learner);
  const auto learner_log = read_file(log);
  INFO(learner_log);
  INFO(read_file(cluster.dir / "node.log"));
  CHECK(learner_exit == 0);
  CHECK(learner_log.find("node: finished (stopped on request)") != std::string::npos);
  CHECK(learner_log.find("Too many open files") == std::string::npos);
  CHECK(fs::exists(run_dir / "checkpoint" / "policy"));
  CHECK(fs::exists(run_dir / "summary.json"));
  CHECK(learner_log.find("learner node: cluster port: ") != std::string::npos);
  for (int fd : held) ::close(fd);
  for (int fd : held_bulk) ::close(fd);
  ::kill(node, SIGTERM);
  wait_exit(node);
}

TEST_CASE("a node without certificates is refused at start, on loopback too, naming the fix") {
  TlsCluster cluster;
  const auto log = cluster.dir / "plain.log";
  CHECK(shell(cluster.node("learner", "") + " --listen 127.0.0.1:0 --run-dir '" + (cluster.dir / "run").string() + "'" +
              kTinyRun + " > '" + log.string() + "' 2>&1") != 0);
  CHECK(read_file(log).find("learner node: --certs DIR is required: every cluster port speaks TLS with the "
                            "cluster's CA, on loopback too") != std::string::npos);
  CHECK(read_file(log).find("deploy/cluster-certs") != std::string::npos);
  CHECK_FALSE(fs::exists(cluster.dir / "run"));  // refused before the warm start
  CHECK(shell(cluster.node("rollout", "") + " --join 127.0.0.1:7000 > '" + log.string() + "' 2>&1") != 0);
  CHECK(read_file(log).find("rollout node: --certs DIR is required") != std::string::npos);
  CHECK(shell(cluster.node("rollout", "") + " --insecure-plaintext --join 10.1.2.3:7000 > '" + log.string() +
              "' 2>&1") != 0);
  CHECK(read_file(log).find("--insecure-plaintext was removed") != std::string::npos);
  CHECK(shell(cluster.node("rollout", (cluster.dir / "missing").string()) + " --join 127.0.0.1:7000 > '" +
              log.string() + "' 2>&1") != 0);
  CHECK(read_file(log).find("cannot read") != std::string::npos);
  // The bulk port is checked before anything starts, and only the learner takes it.
  CHECK(shell(cluster.node("learner", "") + " --bulk-port 70000 > '" + log.string() + "' 2>&1") != 0);
  CHECK(read_file(log).find("--bulk-port must be -1 (off), 0 (any free port) or a port up to 65535, got 70000") !=
        std::string::npos);
  CHECK(shell(cluster.node("rollout", "") + " --join 127.0.0.1:7000 --bulk-port 7001 > '" + log.string() + "' 2>&1") !=
        0);
  CHECK(read_file(log).find("--bulk-port is for --role learner") != std::string::npos);
}
