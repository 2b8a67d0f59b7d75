// A real cluster on 127.0.0.1, started by deploy/local-cluster: one learner
// process and two rollout processes (ports chosen at run time). Checks that
// the learner steps on trajectories from both nodes and both run the latest
// policy, that a join with the wrong secret is refused (on both sides), that
// SIGKILL of a rollout process is survived with its in-flight episodes
// counted lost, that the restarted process rejoins, that a learner killed and
// restarted with --resume gets both nodes back without touching them, and
// that stopping the cluster leaves no process behind; and that the header
// which once crashed the learner before any handshake reaches nothing.
#include "test_process_helpers.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

namespace fs = std::filesystem;

namespace {

const std::string kScript = std::string(SAO_SOURCE_DIR) + "/deploy/local-cluster";

// A tiny model and 1-digit sums: SFT takes about a second, a step a few ms.
const char* kLearnerArgs =
    " --set model.hidden_size=32 --set model.intermediate_size=64 --set model.num_hidden_layers=1"
    " --set model.num_attention_heads=2 --set model.num_key_value_heads=1 --set model.max_position_embeddings=32"
    " --set task.max_digits=1 --set 'task.operators=\"+\"' --set task.test_size=8"
    " --set sft.steps=20 --set sft.batch_size=16 --set sft.log_every=1000 --set eval.max_new_tokens=4"
    " --set rollout.max_new_tokens=4 --set rollout.slots=8"
    " --set train.steps=1000000 --set train.eval_every=0 --set train.checkpoint_every=20";

std::string read_file(const fs::path& path) {
  return sao_test::read_text(path);
}
int run(const std::string& command) {
  return sao_test::shell(command);
}

struct LocalCluster {
  fs::path dir;
  fs::path state;

  explicit LocalCluster(const std::string& name)
      : dir(fs::temp_directory_path() / ("sao_cluster_" + name + "_" + std::to_string(::getpid()))),
        state(dir / "cluster") {
    fs::remove_all(dir);
  }
  ~LocalCluster() {
    stop();
    // Whatever survived a failed check must not outlive the test.
    for (const auto& entry : fs::directory_iterator(state)) {
      if (entry.path().extension() == ".pid") ::kill(pid_of(entry.path().stem().string()), SIGKILL);
    }
    fs::remove_all(dir);
  }
  int start(int rollouts, int env_nodes = 0) {
    return run(kScript + " start --detach --run-dir " + dir.string() + " --rollouts " + std::to_string(rollouts) +
               " --env-nodes " + std::to_string(env_nodes) + " --sao " + SAO_BINARY + " --" + kLearnerArgs + " >" +
               (dir.string() + ".start.log") + " 2>&1");
  }
  int add_node(const std::string& name, const std::string& role = "rollout") {
    return run(kScript + " add-node --run-dir " + dir.string() + " --name " + name + " --role " + role + " >/dev/null");
  }
  int restart_learner() { return run(kScript + " restart-learner --run-dir " + dir.string() + " >/dev/null 2>&1"); }
  int stop() { return run(kScript + " stop --run-dir " + dir.string() + " >/dev/null 2>&1"); }
  pid_t pid_of(const std::string& name) const {
    return static_cast<pid_t>(std::stol(read_file(state / (name + ".pid"))));
  }
  // Running and not a zombie (an orphan's zombie lingers where PID 1 does not reap).
  bool alive(const std::string& name) const {
    const auto stat = read_file("/proc/" + std::to_string(pid_of(name)) + "/stat");
    const auto close = stat.rfind(')');
    return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
  }
  void await_exit(const std::string& name) const {
    for (int i = 0; i < 600 && alive(name); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::string log(const std::string& name) const { return read_file(state / (name + ".log")); }
  nlohmann::json status() const {
    return nlohmann::json::parse(read_file(dir / "cluster_status.json"), nullptr, /*allow_exceptions=*/false);
  }
};

double number(const nlohmann::json& status, const std::string& section, const std::string& key) {
  if (!status.is_object() || !status.contains(section) || !status[section].contains(key)) return -1;
  return status[section][key].get<double>();
}

// Polls the learner's status file until `ready` holds; false after `seconds`.
bool wait_for(const LocalCluster& cluster, double seconds, const std::function<bool(const nlohmann::json&)>& ready) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    if (ready(cluster.status())) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return false;
}

const std::string kNode1 = "from.node-1/rollout-0";
const std::string kNode2 = "from.node-2/rollout-0";

// How long the rollouts may take to acknowledge the learner's latest weights.
// A cap against a hang, not a speed requirement: on two shared cores, with
// the learner stepping as fast as it can, a starved node needs far longer
// than on a quiet machine (10 s failed under ctest -j2 with other work).
constexpr double kCatchUpCap = 240;

// Both rollouts acknowledged a version at least as new as the latest one at
// the time of the call (once the learner has published one: the critic
// warm-up holds version 0 for its first steps, however many have passed).
bool both_run_latest(const LocalCluster& cluster, double seconds) {
  if (!wait_for(cluster, seconds,
                [](const nlohmann::json& s) { return number(s, "weight_sync", "latest_version") >= 1; }))
    return false;
  const double latest = number(cluster.status(), "weight_sync", "latest_version");
  return wait_for(cluster, seconds, [&](const nlohmann::json& s) {
    return number(s, "weight_sync", "version.node-1/rollout-0") >= latest &&
           number(s, "weight_sync", "version.node-2/rollout-0") >= latest;
  });
}

}  // namespace

TEST_CASE("local cluster: two rollout processes feed one learner, survive SIGKILL and rejoin") {
  LocalCluster cluster("rollouts");
  REQUIRE(cluster.start(2) == 0);

  INFO("learner log:\n" << cluster.log("learner"));
  REQUIRE(wait_for(cluster, kCatchUpCap, [](const nlohmann::json& s) {
    return number(s, "coordinator", "steps") >= 3 && number(s, "replay", kNode1) > 0 && number(s, "replay", kNode2) > 0;
  }));
  CHECK(number(cluster.status(), "coordinator", "remote_rollouts") == 2);
  CHECK(both_run_latest(cluster, kCatchUpCap));
  // Weights reach the other processes through the bulk channel, beside CAF.
  CHECK(cluster.log("learner").find("learner node: weights for other processes on bulk port") != std::string::npos);
  CHECK(cluster.log("learner").find("node-1/rollout-0 (cpu) receives weights by bulk_channel") != std::string::npos);
  CHECK(number(cluster.status(), "weight_sync", "bulk_served") >= 2);
  CHECK(number(cluster.status(), "weight_sync", "route_refusals") == 0);
  // Every version a rollout loaded matched the learner's checksum.
  CHECK(number(cluster.status(), "weight_sync", "checksums_verified") >= 2);
  CHECK(number(cluster.status(), "weight_sync", "checksum_mismatches") == 0);

  {
    // A node with the wrong secret is refused, and says why; so does the learner.
    const auto wrong_secret = cluster.dir / "wrong_secret";
    std::ofstream(wrong_secret) << "not the secret\n";
    const auto intruder_log = cluster.dir / "intruder.log";
    REQUIRE(run(std::string(SAO_SOURCE_DIR) + "/deploy/cluster-certs " + (cluster.state / "certs").string() +
                " intruder > /dev/null") == 0);
    const int exit_code =
        run(std::string(SAO_BINARY) + " node --role rollout --name intruder --join 127.0.0.1:" +
            std::to_string(std::stoi(read_file(cluster.state / "port"))) + " --secret-file " + wrong_secret.string() +
            " --certs " + (cluster.state / "certs" / "intruder").string() + " >" + intruder_log.string() + " 2>&1");
    CHECK(exit_code == 2);
    CHECK(read_file(intruder_log).find("learner refused the join: wrong cluster secret") != std::string::npos);
    CHECK(cluster.log("learner").find("refused node 'intruder': wrong cluster secret") != std::string::npos);

    // A second process under a name in use is refused too.
    const auto twin_log = cluster.dir / "twin.log";
    CHECK(run(std::string(SAO_BINARY) + " node --role rollout --name node-1 --join 127.0.0.1:" +
              std::to_string(std::stoi(read_file(cluster.state / "port"))) + " --secret-file " +
              (cluster.state / "secret").string() + " --certs " + (cluster.state / "certs" / "node-1").string() + " >" +
              twin_log.string() + " 2>&1") == 2);
    CHECK(read_file(twin_log).find("the name 'node-1' is in use by a connected node") != std::string::npos);

    // A second learner for the same run and port fails to listen before it
    // starts anything, so the running learner's metrics are untouched.
    const auto metrics_before = fs::file_size(cluster.dir / "metrics.jsonl");
    const auto second_log = cluster.dir / "second_learner.log";
    CHECK(run(std::string(SAO_BINARY) + " node --role learner --run-dir " + cluster.dir.string() +
              " --listen 127.0.0.1:" + std::to_string(std::stoi(read_file(cluster.state / "port"))) +
              " --secret-file " + (cluster.state / "secret").string() + " --certs " +
              (cluster.state / "certs" / "learner").string() + kLearnerArgs + " >" + second_log.string() + " 2>&1") ==
          1);
    CHECK(read_file(second_log).find("learner node: cannot listen on 127.0.0.1:") != std::string::npos);
    CHECK(fs::file_size(cluster.dir / "metrics.jsonl") >= metrics_before);
  }

  // SIGKILL one rollout process: the learner notices, counts the episodes it
  // had in flight, and keeps stepping on the other node's trajectories.
  REQUIRE(::kill(cluster.pid_of("node-2"), SIGKILL) == 0);
  cluster.await_exit("node-2");
  REQUIRE(wait_for(cluster, kCatchUpCap, [](const nlohmann::json& s) {
    return number(s, "coordinator", "remote_rollouts_lost") >= 1 && number(s, "coordinator", "remote_rollouts") == 1;
  }));
  const auto after_kill = cluster.status();
  CHECK(number(after_kill, "coordinator", "episodes_lost") >= 8);
  const double steps_at_kill = number(after_kill, "coordinator", "steps");
  const double node1_at_kill = number(after_kill, "replay", kNode1);
  CHECK(wait_for(cluster, kCatchUpCap, [&](const nlohmann::json& s) {
    return number(s, "coordinator", "steps") >= steps_at_kill + 3 && number(s, "replay", kNode1) > node1_at_kill;
  }));
  // Nothing more from the dead node: replay serves its mailbox in order, so
  // once the live node's count has grown by two more batches after this
  // read, anything the dead node sent before dying has been counted.
  const auto before_more = cluster.status();
  const double node2_after = number(before_more, "replay", kNode2);
  const double node1_before_more = number(before_more, "replay", kNode1);
  REQUIRE(wait_for(cluster, kCatchUpCap,
                   [&](const nlohmann::json& s) { return number(s, "replay", kNode1) >= node1_before_more + 16; }));
  CHECK(number(cluster.status(), "replay", kNode2) == node2_after);

  // The restarted process rejoins under its old name and contributes again.
  REQUIRE(cluster.add_node("node-2") == 0);
  CHECK(wait_for(cluster, kCatchUpCap, [&](const nlohmann::json& s) {
    return number(s, "coordinator", "remote_rollouts") == 2 && number(s, "replay", kNode2) > node2_after;
  }));
  CHECK(both_run_latest(cluster, kCatchUpCap));

  // SIGKILL the learner and start it again from its last checkpoint: both
  // nodes find it again by themselves (their join loop retries with backoff).
  REQUIRE(::kill(cluster.pid_of("learner"), SIGKILL) == 0);
  const double steps_at_learner_kill = number(cluster.status(), "coordinator", "steps");
  fs::remove(cluster.dir / "cluster_status.json");
  cluster.await_exit("learner");
  REQUIRE(cluster.restart_learner() == 0);
  CHECK(cluster.log("learner").find("node: resuming from") != std::string::npos);
  CHECK(wait_for(cluster, kCatchUpCap, [&](const nlohmann::json& s) {
    return number(s, "coordinator", "remote_rollouts") == 2 && s.value("nodes_joined", 0) == 2 &&
           number(s, "coordinator", "steps") >= steps_at_learner_kill - 20 + 3;
  }));
  CHECK(both_run_latest(cluster, kCatchUpCap));

  // Stopping ends the learner's run in order; the nodes exit on their own.
  CHECK(cluster.stop() == 0);
  CHECK_FALSE(cluster.alive("learner"));
  CHECK_FALSE(cluster.alive("node-1"));
  CHECK_FALSE(cluster.alive("node-2"));
  CHECK(cluster.log("learner").find("node: finished (stopped on request)") != std::string::npos);
  CHECK(cluster.log("node-1").find("node node-1: the learner ended the run") != std::string::npos);
}

TEST_CASE("local cluster: an env process serves a rollout process that has no envs, which waits while it is gone") {
  LocalCluster cluster("envs");
  REQUIRE(cluster.start(1, 1) == 0);
  INFO("learner log:\n" << cluster.log("learner"));
  REQUIRE(wait_for(cluster, kCatchUpCap, [](const nlohmann::json& s) {
    return number(s, "coordinator", "env_node_envs") == 1 && number(s, "coordinator", "steps") >= 3 &&
           number(s, "replay", kNode1) > 0;
  }));
  // The rollout node runs no env of its own: the env node's env did the work.
  // (Its status file is rewritten every 2 s.)
  bool env_served = false;
  for (int i = 0; i < 5 * static_cast<int>(kCatchUpCap) && !env_served; ++i) {
    const auto status = nlohmann::json::parse(read_file(cluster.state / "env-1.status.json"), nullptr, false);
    env_served = status.is_object() &&
                 number(status.value("actors", nlohmann::json::object()), "env-1/env-0", "messages_handled") > 0;
    if (!env_served) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  CHECK(env_served);
  CHECK(cluster.log("node-1").find("/env-") == std::string::npos);

  // Without an env node the rollout has nothing to play against: it waits.
  REQUIRE(::kill(cluster.pid_of("env-1"), SIGKILL) == 0);
  cluster.await_exit("env-1");
  REQUIRE(wait_for(cluster, kCatchUpCap,
                   [](const nlohmann::json& s) { return number(s, "coordinator", "env_node_envs") == 0; }));
  CHECK(cluster.log("learner").find("rollout node-1/rollout-0 waits for an env node") != std::string::npos);

  // A new env process gets it going again.
  const double before = number(cluster.status(), "replay", kNode1);
  REQUIRE(cluster.add_node("env-1", "env") == 0);
  CHECK(wait_for(cluster, kCatchUpCap, [&](const nlohmann::json& s) {
    return number(s, "coordinator", "env_node_envs") == 1 && number(s, "replay", kNode1) >= before + 16;
  }));
  CHECK(cluster.stop() == 0);
  CHECK_FALSE(cluster.alive("learner"));
  CHECK_FALSE(cluster.alive("node-1"));
  CHECK_FALSE(cluster.alive("env-1"));
}

TEST_CASE("local cluster: a BASP header sent before any handshake reaches nothing; the learner serves on") {
  LocalCluster cluster("basp");
  REQUIRE(cluster.start(1) == 0);
  INFO("learner log:\n" << cluster.log("learner"));
  REQUIRE(wait_for(cluster, kCatchUpCap, [](const nlohmann::json& s) {
    return number(s, "coordinator", "steps") >= 3 && number(s, "replay", kNode1) > 0;
  }));
  // The header that crashed the plaintext learner with SIGSEGV inside
  // libcaf_io 0.17.6 (operation 0 = server handshake, payload length 0,
  // operation data 1), then one claiming a 1 GiB payload. The learner's
  // port closes each connection once it is not a TLS handshake.
  const int port = std::stoi(read_file(cluster.state / "port"));
  for (const uint32_t payload : {0u, 1u << 30}) {
    std::string header(32, '\0');
    for (int i = 0; i < 4; ++i) header[4 + i] = static_cast<char>((payload >> (24 - 8 * i)) & 0xff);
    header[15] = 1;
    const int fd = sao_test::connect_loopback(port);
    REQUIRE(::send(fd, header.data(), header.size(), MSG_NOSIGNAL) == 32);
    char reply[512];
    while (::recv(fd, reply, sizeof(reply), 0) > 0) {
    }
    ::close(fd);
  }
  CHECK(cluster.alive("learner"));
  // Still serving its node: more steps on more of its trajectories.
  const auto before = cluster.status();
  CHECK(wait_for(cluster, kCatchUpCap, [&](const nlohmann::json& s) {
    return number(s, "coordinator", "steps") >= number(before, "coordinator", "steps") + 3 &&
           number(s, "replay", kNode1) > number(before, "replay", kNode1) &&
           number(s, "coordinator", "remote_rollouts") == 1;
  }));
  CHECK(cluster.stop() == 0);
  CHECK(cluster.log("learner").find("node: finished (stopped on request)") != std::string::npos);
  CHECK(cluster.log("learner").find("learner node: listening on 127.0.0.1:") != std::string::npos);
}
