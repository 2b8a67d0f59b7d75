// The cluster gatekeeper admits a node only with the learner's build
// fingerprint and secret, and a refusal names the mismatch; the fingerprint
// is a stable digest of the message set. Weights reach a rollout of another
// actor system through the bulk channel, or through CAF when it cannot read
// from it. (Joins over a real network, by separate processes, are in
// test_cluster_local.cpp.)
#include "actors/cluster.hpp"
#include "actors/env_actor.hpp"
#include "actors/replay_actor.hpp"
#include "actors/rollout_actor.hpp"
#include "actors/weight_sync_actor.hpp"
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

TEST_CASE("weights reach a rollout of another node through the bulk channel; one that cannot read it gets CAF bytes") {
  // The learner's side: weight-sync with a bulk server, published for the
  // rollout node to find (as the gatekeeper hands it out in a real cluster).
  NetworkedSystem learner;
  auto bulk_server = std::make_shared<sao::net::BulkServer>("127.0.0.1", 0, "correct horse");
  auto weight_sync = sao::actors::spawn_weight_sync_actor(*learner.system, 0, bulk_server);
  auto published = learner.system->middleman().publish(weight_sync, 0, "127.0.0.1");
  REQUIRE(published);
  caf::scoped_actor driver{*learner.system};
  sao::model::CausalLM policy(sao_test::tiny_byte_model());
  sao::model::init_weights(*policy, 1);
  driver->send(weight_sync, sao::msg::PolicyWeights{0, sao::model::pack_module(*policy), {}, {}, 0, 0});

  // The rollout node: its own actor system, env and replay; two rollouts,
  // the second with a secret the bulk server refuses.
  NetworkedSystem node;
  auto remote_sync = node.system->middleman().remote_actor<sao::actors::WeightSyncActor>("127.0.0.1", *published);
  REQUIRE(remote_sync);
  caf::scoped_actor stand_in{*node.system};  // coordinator and learner
  auto replay = sao::actors::spawn_replay_actor(*node.system, sao::replay::ReplayConfig{},
                                                caf::actor_cast<sao::actors::LearnerActor>(stand_in));
  auto env = sao::actors::spawn_env_actor(*node.system, {"env-0", "arithmetic", nlohmann::json::object()});
  std::vector<sao::actors::RolloutActor> rollouts;
  for (const std::string secret : {"correct horse", "battery staple"}) {
    sao::actors::RolloutActorConfig config;
    config.name = "node-1/rollout-" + std::to_string(rollouts.size());
    config.index = static_cast<int64_t>(rollouts.size());
    config.model = sao_test::tiny_byte_model();
    config.rollout.episodes_per_actor = 2;
    config.rollout.max_new_tokens = 4;
    config.env = env;
    config.replay = caf::actor_cast<sao::actors::ReplayActor>(replay);
    config.weight_sync = *remote_sync;
    config.coordinator = caf::actor_cast<sao::actors::CoordinatorActor>(stand_in);
    config.bulk_host = "127.0.0.1";
    config.bulk_secret = secret;
    rollouts.push_back(sao::actors::spawn_rollout_actor(*node.system, config));
  }

  auto both_at = [&](int64_t version) {
    const auto give_up_at = std::chrono::steady_clock::now() + kHangGuard;
    while (std::chrono::steady_clock::now() < give_up_at) {
      const auto numbers = status_numbers(driver, weight_sync);
      if (numbers.count("version.node-1/rollout-0") && numbers.at("version.node-1/rollout-0") == version &&
          numbers.count("version.node-1/rollout-1") && numbers.at("version.node-1/rollout-1") == version) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  };
  REQUIRE(both_at(0));
  sao::model::init_weights(*policy, 2);
  driver->send(weight_sync, sao::msg::PolicyWeights{1, sao::model::pack_module(*policy), {}, {}, 0, 0});
  REQUIRE(both_at(1));

  const auto numbers = status_numbers(driver, weight_sync);
  CHECK(numbers.at("bulk_port") == bulk_server->port());
  // rollout-0 read both versions from the bulk server; rollout-1 was
  // refused once, said so in its ack, and got both versions as CAF bytes.
  CHECK(numbers.at("bulk_served") == 2);
  CHECK(numbers.at("bulk_refused") == 1);
  CHECK(numbers.at("bulk_failed_rollouts") == 1);
  CHECK(numbers.at("pushes_bulk_channel") == 3);
  CHECK(numbers.at("pushes_host_bytes") == 2);
  CHECK(bulk_server->stats().bytes_sent == 2 * sao::model::pack_module(*policy).bytes.size());
  // The refused rollout names why in its status.
  stand_in->request(rollouts[1], kHangGuard, sao::atoms::status_atom_v)
      .receive(
          [&](const sao::msg::ActorStatus& status) {
            CHECK(status.numbers.at("policy_version") == 1);
            CHECK_MESSAGE(
                status.last_error.find("refused: wrong secret (node-1/rollout-1, weights v0)") != std::string::npos,
                status.last_error);
          },
          [](const caf::error&) { FAIL("no status"); });

  for (auto& actor : rollouts) caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(replay, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(env, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(weight_sync, caf::exit_reason::user_shutdown);
}
