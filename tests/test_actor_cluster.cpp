// The cluster gatekeeper admits a node only with the learner's build
// fingerprint and secret, and a refusal names the mismatch; the fingerprint
// is a stable digest of the message set. Weights reach the rollouts of a node
// process through the bulk channel (one read per version for the node), or
// through CAF for a rollout that cannot read from it. (Joins over a real network, by separate processes, are in
// test_cluster_local.cpp.)
#include "actors/cluster/cluster.hpp"
#include "actors/run/env_actor.hpp"
#include "actors/run/replay_actor.hpp"
#include "actors/run/rollout_actor.hpp"
#include "actors/run/weight_sync_actor.hpp"
#include "model/tensor_blob.hpp"
#include "model/transformer.hpp"
#include "net/bulk_transfer.hpp"
#include "test_tiny_model.hpp"

#include <doctest/doctest.h>
#include <caf/io/all.hpp>

#include <chrono>
#include <map>
#include <string>
#include <thread>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

struct GatekeeperFixture {
  caf::actor_system_config config;
  std::unique_ptr<caf::actor_system> system;
  caf::actor stand_in;  // plays coordinator, replay and weight-sync: the gatekeeper mostly hands them out
  sao::actors::GatekeeperActor gatekeeper;

  GatekeeperFixture() {
    sao::actors::register_protocol(config);
    system = std::make_unique<caf::actor_system>(config);
    // As coordinator it answers "who uses this node name": nobody.
    stand_in = system->spawn(
        []() -> caf::behavior { return {[](sao::atoms::join_atom, const std::string&) { return caf::node_id{}; }}; });
    sao::actors::GatekeeperConfig gatekeeper_config;
    gatekeeper_config.secret = "correct horse";
    gatekeeper_config.fingerprint = sao::actors::message_set_fingerprint();
    gatekeeper_config.run_config_json = R"({"run":{"name":"test"}})";
    gatekeeper = sao::actors::spawn_gatekeeper(*system, gatekeeper_config);
    caf::anon_send(gatekeeper, sao::atoms::start_atom_v, stand_in, stand_in, stand_in);
  }
  ~GatekeeperFixture() {
    caf::anon_send_exit(gatekeeper, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(stand_in, caf::exit_reason::user_shutdown);
  }

  // The node number on success, else the refusal's text.
  std::string join(const std::string& role, const std::string& fingerprint, const std::string& secret) {
    caf::scoped_actor self{*system};
    std::string outcome;
    self->request(gatekeeper, std::chrono::seconds(120), sao::atoms::join_atom_v, std::string("node-a"), role,
                  fingerprint, secret)
        .receive(
            [&](const std::string& config_json, int64_t number, const caf::actor& coordinator, const caf::actor&,
                const caf::actor&) {
              CHECK(config_json == R"({"run":{"name":"test"}})");
              CHECK(coordinator == stand_in);
              outcome = "joined #" + std::to_string(number);
            },
            [&](const caf::error& error) { outcome = sao::actors::describe_error(*system, error); });
    return outcome;
  }
};

}  // namespace

TEST_CASE("the message-set fingerprint is a stable 16-digit hex digest") {
  const auto fingerprint = sao::actors::message_set_fingerprint();
  CHECK(fingerprint.size() == 16);
  CHECK(fingerprint.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(sao::actors::message_set_fingerprint() == fingerprint);
}

TEST_CASE_FIXTURE(GatekeeperFixture, "a node with the learner's build and secret joins; numbers count up") {
  const auto fingerprint = sao::actors::message_set_fingerprint();
  CHECK(join("rollout", fingerprint, "correct horse") == "joined #1");
  CHECK(join("rollout", fingerprint, "correct horse") == "joined #2");
}

TEST_CASE_FIXTURE(GatekeeperFixture, "a wrong secret is refused and says so") {
  const auto answer = join("rollout", sao::actors::message_set_fingerprint(), "correct horsf");
  CHECK(answer == "learner refused the join: wrong cluster secret");
  CHECK(join("rollout", sao::actors::message_set_fingerprint(), "") == answer);
}

TEST_CASE_FIXTURE(GatekeeperFixture, "an incompatible build is refused with both fingerprints named") {
  const auto ours = sao::actors::message_set_fingerprint();
  const auto answer = join("rollout", "0123456789abcdef", "correct horse");
  CHECK(answer.find("build fingerprint mismatch") != std::string::npos);
  CHECK(answer.find("learner " + ours) != std::string::npos);
  CHECK(answer.find("node 0123456789abcdef") != std::string::npos);
}

TEST_CASE_FIXTURE(GatekeeperFixture, "an unknown role is refused") {
  CHECK(join("trainer", sao::actors::message_set_fingerprint(), "correct horse").find("unknown role 'trainer'") !=
        std::string::npos);
}

namespace {

constexpr auto kHangGuard = std::chrono::seconds(120);

struct NetworkedSystem {
  caf::actor_system_config config;
  std::unique_ptr<caf::actor_system> system;
  NetworkedSystem() {
    sao::actors::register_protocol(config);
    sao::actors::enable_cluster_networking(config);
    system = std::make_unique<caf::actor_system>(config);
  }
};

std::map<std::string, double> status_numbers(caf::scoped_actor& self, const sao::actors::WeightSyncActor& sync) {
  std::map<std::string, double> numbers;
  self->request(sync, kHangGuard, sao::atoms::status_atom_v)
      .receive([&](const sao::msg::ActorStatus& status) { numbers = status.numbers; }, [](const caf::error&) {});
  return numbers;
}

}  // namespace

// One rollout of the node below: which secret its bulk reader presents
// (the node's shared reader, or one of its own with a wrong secret), and
// its rollout.weights_dtype.
struct NodeRollout {
  bool wrong_secret = false;
  const char* weights_dtype = "fp32";
};

// The rollout node of the tests below, in a child process (two actor
// systems in one process do not shut down reliably in CAF 0.17: a rollout
// handle sent across them can keep its detached thread waiting at
// teardown). Runs "node-1/rollout-i" for each of `specs` until the parent
// kills it.
[[noreturn]] void run_rollout_node(int port_pipe, const std::vector<NodeRollout>& specs) {
  uint16_t port = 0;
  if (::read(port_pipe, &port, sizeof(port)) != sizeof(port)) std::_Exit(3);
  NetworkedSystem node;
  auto remote_sync = node.system->middleman().remote_actor<sao::actors::WeightSyncActor>("127.0.0.1", port);
  if (!remote_sync) std::_Exit(4);
  caf::scoped_actor stand_in{*node.system};  // coordinator and learner
  auto replay = sao::actors::spawn_replay_actor(*node.system, sao::replay::ReplayConfig{},
                                                caf::actor_cast<sao::actors::LearnerActor>(stand_in));
  auto env = sao::actors::spawn_env_actor(*node.system, {"env-0", "arithmetic", nlohmann::json::object()});
  // The node's rollouts share one reader, as sao node sets them up.
  auto node_reader = std::make_shared<sao::net::SharedBulkReader>("127.0.0.1", "correct horse", 60000);
  std::vector<sao::actors::RolloutActor> rollouts;
  for (const auto& spec : specs) {
    sao::actors::RolloutActorConfig config;
    config.name = "node-1/rollout-" + std::to_string(rollouts.size());
    config.index = static_cast<int64_t>(rollouts.size());
    config.model = sao_test::tiny_byte_model();
    config.rollout.slots = 2;
    config.rollout.max_new_tokens = 4;
    config.rollout.weights_dtype = spec.weights_dtype;
    config.env = env;
    config.replay = caf::actor_cast<sao::actors::ReplayActor>(replay);
    config.weight_sync = *remote_sync;
    config.coordinator = caf::actor_cast<sao::actors::CoordinatorActor>(stand_in);
    config.bulk_reader = spec.wrong_secret
                             ? std::make_shared<sao::net::SharedBulkReader>("127.0.0.1", "battery staple", 60000)
                             : node_reader;
    rollouts.push_back(sao::actors::spawn_rollout_actor(*node.system, config));
  }
  for (;;) ::pause();
}

// The learner's side of the tests below: weight-sync with a bulk server,
// published for a forked rollout node to find (as the gatekeeper hands it
// out in a real cluster). The node is killed when this goes.
class LearnerWithNode {
  // First, so that it is destroyed last: the handles below belong to it.
  std::unique_ptr<NetworkedSystem> learner_;

 public:
  explicit LearnerWithNode(const std::vector<NodeRollout>& specs) : rollouts_(specs.size()) {
    // Fork first, while this process runs no other thread.
    int port_pipe[2];
    REQUIRE(::pipe(port_pipe) == 0);
    std::fflush(nullptr);
    node_pid_ = ::fork();
    REQUIRE(node_pid_ >= 0);
    if (node_pid_ == 0) {
      ::close(port_pipe[1]);
      run_rollout_node(port_pipe[0], specs);
    }
    ::close(port_pipe[0]);
    learner_ = std::make_unique<NetworkedSystem>();
    bulk_server = std::make_shared<sao::net::BulkServer>("127.0.0.1", 0, "correct horse");
    weight_sync = sao::actors::spawn_weight_sync_actor(*learner_->system, 0, bulk_server);
    driver = std::make_unique<caf::scoped_actor>(*learner_->system);
    auto published = learner_->system->middleman().publish(weight_sync, 0, "127.0.0.1");
    REQUIRE(published);
    port_pipe_ = port_pipe[1];
    port_ = *published;
  }
  ~LearnerWithNode() {
    stop_node();
    caf::anon_send_exit(weight_sync, caf::exit_reason::user_shutdown);
  }
  // Sends the version, and, the first time, tells the node where to register.
  void send(const sao::weights::Packet& packet) {
    (*driver)->send(weight_sync, packet);
    if (port_pipe_ >= 0) {
      REQUIRE(::write(port_pipe_, &port_, sizeof(port_)) == sizeof(port_));
      ::close(port_pipe_);
      port_pipe_ = -1;
    }
  }
  std::map<std::string, double> numbers() { return status_numbers(*driver, weight_sync); }
  // Waits until every rollout of the node acknowledged `version`.
  bool all_at(int64_t version) {
    const auto give_up_at = std::chrono::steady_clock::now() + kHangGuard;
    while (std::chrono::steady_clock::now() < give_up_at) {
      const auto now = numbers();
      bool all = true;
      for (size_t r = 0; r < rollouts_; ++r) {
        const auto key = "version.node-1/rollout-" + std::to_string(r);
        all = all && now.count(key) && now.at(key) == version;
      }
      if (all) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    for (const auto& item : numbers()) MESSAGE(item.first << " = " << item.second);
    return false;
  }
  void stop_node() {
    if (node_pid_ <= 0) return;
    ::kill(node_pid_, SIGKILL);
    ::waitpid(node_pid_, nullptr, 0);
    node_pid_ = -1;
  }

  std::shared_ptr<sao::net::BulkServer> bulk_server;
  sao::actors::WeightSyncActor weight_sync;
  std::unique_ptr<caf::scoped_actor> driver;

 private:
  size_t rollouts_;
  pid_t node_pid_ = -1;
  int port_pipe_ = -1;
  uint16_t port_ = 0;
};

TEST_CASE("weights reach a rollout of another node through the bulk channel; one that cannot read it gets CAF bytes") {
  // rollout-0 and rollout-1 share the node's reader; rollout-2 has one of
  // its own with a secret the bulk server refuses.
  LearnerWithNode cluster({{false, "fp32"}, {false, "fp32"}, {true, "fp32"}});
  sao::model::CausalLM policy(sao_test::tiny_byte_model());
  sao::model::init_weights(*policy, 1);
  cluster.send(sao::weights::host_packet(0, sao::model::pack_module(*policy)));
  const bool first = cluster.all_at(0);
  sao::model::init_weights(*policy, 2);
  cluster.send(sao::weights::host_packet(1, sao::model::pack_module(*policy)));
  const bool second = first && cluster.all_at(1);
  const auto numbers = cluster.numbers();
  cluster.stop_node();
  REQUIRE(first);
  REQUIRE(second);

  CHECK(numbers.at("bulk_port") == cluster.bulk_server->port());
  // The node read each version once for rollout-0 and rollout-1 (one of them
  // read it, the other took the node's copy: two reads in all, not four);
  // rollout-2 was refused once, said so in its ack, and got both versions as
  // CAF bytes.
  CHECK(numbers.at("bulk_served") == 2);
  CHECK(numbers.at("bulk_refused") == 1);
  CHECK(numbers.at("route_refusals") == 1);
  // Every applied version matched its checksum (3 rollouts x 2 versions).
  CHECK(numbers.at("checksums_verified") == 6);
  CHECK(numbers.at("checksum_mismatches") == 0);
  CHECK(numbers.at("pushes_bulk_channel") == 5);
  CHECK(numbers.at("pushes_caf_bytes") == 2);
  CHECK(cluster.bulk_server->stats().bytes_sent == 2 * sao::model::pack_module(*policy).bytes.size());
}

TEST_CASE("a bf16 replica of another node gets its first version in bf16 and each later one as a delta, checked") {
  // rollout-0 runs a bf16 replica, rollout-1 an fp32 copy.
  LearnerWithNode cluster({{false, "bf16"}, {false, "fp32"}});
  sao::model::CausalLM policy(sao_test::tiny_byte_model());
  sao::model::init_weights(*policy, 1);
  const auto fp32_bytes = static_cast<double>(sao::model::pack_module(*policy).bytes.size());
  cluster.send(sao::weights::host_packet(1, sao::model::pack_module(*policy)));
  bool reached = cluster.all_at(1);
  // Two learner-sized steps: most bf16 values stay put.
  for (int64_t version = 2; version <= 3 && reached; ++version) {
    {
      torch::NoGradGuard no_grad;
      torch::manual_seed(static_cast<uint64_t>(version));
      for (auto& parameter : policy->parameters()) parameter.add_(torch::randn_like(parameter) * 1e-5);
    }
    cluster.send(sao::weights::host_packet(version, sao::model::pack_module(*policy)));
    reached = cluster.all_at(version);
  }
  const auto numbers = cluster.numbers();
  cluster.stop_node();
  REQUIRE(reached);
  // The fp32 copy read every version from the bulk channel; the replica got
  // v1 in bf16 by CAF bytes (half the bytes) and v2, v3 as deltas. Every
  // one matched its checksum after loading: the replica holds exactly the
  // bf16 rounding of each version.
  CHECK(numbers.at("pushes_bulk_channel") == 3);
  CHECK(numbers.at("pushes_caf_bytes") == 1);
  CHECK(numbers.at("pushes_bf16_delta") == 2);
  CHECK(numbers.at("checksums_verified") == 6);
  CHECK(numbers.at("checksum_mismatches") == 0);
  CHECK(numbers.at("route_refusals") == 0);
  CHECK(numbers.at("bytes_caf_bytes") == fp32_bytes / 2);
  CHECK(numbers.at("bytes_bf16_delta") > 0);
  CHECK(numbers.at("bytes_bf16_delta") < fp32_bytes / 2);  // two deltas below one bf16 version
}
