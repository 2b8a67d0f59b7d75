// The cluster gatekeeper admits a node only with the learner's build
// fingerprint and secret, and a refusal names the mismatch; the fingerprint
// is a stable digest of the message set. (Joins over a real network, by
// separate processes, are in test_cluster_local.cpp.)
#include "actors/cluster.hpp"

#include <doctest/doctest.h>

#include <string>

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
