// Actor-level behaviour with a real actor system: replay triggers a learner
// step for a single trajectory, drops stale ones, and weight updates reach
// every rollout actor.
#include "actors/protocol.hpp"
#include "actors/run/env_actor.hpp"
#include "actors/run/replay_actor.hpp"
#include "actors/run/rollout_actor.hpp"
#include "actors/run/weight_sync_actor.hpp"
#include "config/run_config.hpp"
#include "env/environment.hpp"
#include "model/tensor_blob.hpp"
#include "model/transformer.hpp"
#include "test_tiny_model.hpp"
#include "tokenizer/byte_tokenizer.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;

namespace {

// How long a reply may take before the test calls it a hang. Not a speed
// requirement: an event that arrives at all arrives long before this, even
// on a machine shared with a build.
constexpr auto kHangGuard = 120s;

struct System {
  caf::actor_system_config config;
  std::unique_ptr<caf::actor_system> system;
  System() {
    sao::actors::register_protocol(config);
    system = std::make_unique<caf::actor_system>(config);
  }
};

sao::algo::Trajectory trajectory_at_version(int64_t version) {
  sao::algo::Trajectory message;
  auto& t = message;
  t.tokens = {257, 49, 61, 50, 258};
  t.action_mask = {0, 0, 0, 1, 1};
  t.behaviour_logprobs = {0, 0, 0, -0.5f, -0.1f};
  t.policy_versions = {-1, -1, -1, version, version};
  t.rewards = {0, 0, 0, 0, 1};
  message.origin.finished_at_ns = 1;
  message.origin.rollout = "test";
  return message;
}

sao::weights::Packet weights_of(const sao::model::CausalLM& policy, int64_t version) {
  return sao::weights::host_packet(version, sao::model::pack_module(*policy));
}

// What a rollout actor needs around it: a replay (whose learner is a
// scoped actor), a weight-sync actor, an arithmetic env actor, a driver, and
// a policy to send weights of. The actors are stopped on destruction.
struct RolloutRig {
  System s;
  caf::scoped_actor fake_learner{*s.system};
  caf::scoped_actor driver{*s.system};
  sao::actors::ReplayActor replay;
  sao::actors::WeightSyncActor weight_sync;
  sao::actors::EnvActor env;
  sao::model::CausalLM policy{sao_test::tiny_byte_model()};
  std::vector<sao::actors::RolloutActor> rollouts;

  RolloutRig() {
    replay = sao::actors::spawn_replay_actor(*s.system, sao::replay::ReplayConfig{},
                                             caf::actor_cast<sao::actors::LearnerActor>(fake_learner));
    weight_sync = sao::actors::spawn_weight_sync_actor(*s.system);
    env = sao::actors::spawn_env_actor(*s.system, {"env-0", "arithmetic", nlohmann::json::object()});
    sao::model::init_weights(*policy, 1);
  }
  ~RolloutRig() {
    for (auto& actor : rollouts) caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
    for (const auto& actor : {replay.address(), weight_sync.address(), env.address()}) {
      caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
    }
  }
  sao::actors::RolloutActor spawn_rollout(int index, int64_t slots, const std::string& weight_switch) {
    sao::actors::RolloutActorConfig config;
    config.name = "rollout-" + std::to_string(index);
    config.index = index;
    config.model = sao_test::tiny_byte_model();
    config.rollout.slots = slots;
    config.rollout.max_new_tokens = 4;
    config.rollout.weight_switch = weight_switch;
    config.env = env;
    config.replay = replay;
    config.weight_sync = weight_sync;
    config.coordinator = caf::actor_cast<sao::actors::CoordinatorActor>(driver);
    rollouts.push_back(sao::actors::spawn_rollout_actor(*s.system, config));
    return rollouts.back();
  }
};

}  // namespace

TEST_CASE("in SAO mode a single finished trajectory starts a learner step at once") {
  System s;
  caf::scoped_actor learner{*s.system};
  caf::scoped_actor rollout{*s.system};
  sao::replay::ReplayConfig config;
  config.min_batch = 1;
  config.max_batch = 8;
  auto replay = sao::actors::spawn_replay_actor(*s.system, config, caf::actor_cast<sao::actors::LearnerActor>(learner));
  learner->send(replay, sao::atoms::learner_idle_atom_v, int64_t{0});
  bool acked = false;
  rollout->request(replay, kHangGuard, trajectory_at_version(0))
      .receive([&](const sao::msg::ReplayAck& ack) { acked = ack.accepted; },
               [&](const caf::error& error) { FAIL(s.system->render(error)); });
  CHECK(acked);
  bool got_batch = false;
  learner->receive([&](const sao::msg::TrainBatch& batch) { got_batch = batch.trajectories.size() == 1; },
                   caf::after(kHangGuard) >> [] {});
  CHECK(got_batch);
  // The learner is busy now: a second trajectory waits instead of being sent.
  rollout->request(replay, kHangGuard, trajectory_at_version(0))
      .receive([](const sao::msg::ReplayAck&) {}, [](const caf::error&) {});
  // The replay sends a batch before it acknowledges, so after the ack any
  // batch is already in the learner's mailbox: look without waiting.
  bool second_batch = false;
  learner->receive([&](const sao::msg::TrainBatch&) { second_batch = true; }, caf::after(0ms) >> [] {});
  CHECK_FALSE(second_batch);
  learner->send(replay, sao::atoms::learner_idle_atom_v, int64_t{1});
  learner->receive([&](const sao::msg::TrainBatch& batch) { second_batch = batch.trajectories.size() == 1; },
                   caf::after(kHangGuard) >> [] {});
  CHECK(second_batch);
  caf::anon_send_exit(replay, caf::exit_reason::user_shutdown);
}

TEST_CASE("a trajectory staler than max_staleness is dropped and counted") {
  System s;
  caf::scoped_actor learner{*s.system};
  caf::scoped_actor rollout{*s.system};
  sao::replay::ReplayConfig config;
  config.max_staleness = 2;
  auto replay = sao::actors::spawn_replay_actor(*s.system, config, caf::actor_cast<sao::actors::LearnerActor>(learner));
  learner->send(replay, sao::atoms::learner_idle_atom_v, int64_t{5});
  bool accepted = true;
  rollout
      ->request(replay, kHangGuard, trajectory_at_version(2))  // staleness 3 > 2
      .receive([&](const sao::msg::ReplayAck& ack) { accepted = ack.accepted; }, [](const caf::error&) {});
  CHECK_FALSE(accepted);
  bool got_batch = false;  // a batch would be in the mailbox before the ack (see above)
  learner->receive([&](const sao::msg::TrainBatch&) { got_batch = true; }, caf::after(0ms) >> [] {});
  CHECK_FALSE(got_batch);
  double dropped = -1;
  rollout->request(replay, kHangGuard, sao::atoms::status_atom_v)
      .receive([&](const sao::msg::ActorStatus& status) { dropped = status.numbers.at("dropped_stale"); },
               [](const caf::error&) {});
  CHECK(dropped == 1);
  // Staleness exactly at the limit is admitted.
  rollout->request(replay, kHangGuard, trajectory_at_version(3))
      .receive([&](const sao::msg::ReplayAck& ack) { accepted = ack.accepted; }, [](const caf::error&) {});
  CHECK(accepted);
  caf::anon_send_exit(replay, caf::exit_reason::user_shutdown);
}

TEST_CASE("a weight update reaches every rollout actor and their versions converge") {
  // Both switch policies: between decode steps, and only when no episode is
  // mid-turn. doctest runs the whole test once per subcase.
  std::string weight_switch;
  SUBCASE("in_flight") {
    weight_switch = "in_flight";
  }
  SUBCASE("turn_boundary") {
    weight_switch = "turn_boundary";
  }
  RolloutRig rig;
  auto& driver = rig.driver;
  auto& weight_sync = rig.weight_sync;
  auto& policy = rig.policy;
  driver->send(weight_sync, weights_of(policy, 0));
  for (int i = 0; i < 3; ++i) rig.spawn_rollout(i, 4, weight_switch);
  auto versions_converged_to = [&](int64_t version) {
    const auto give_up_at = std::chrono::steady_clock::now() + kHangGuard;
    while (std::chrono::steady_clock::now() < give_up_at) {
      std::map<std::string, int64_t> versions;
      driver->request(weight_sync, kHangGuard, sao::atoms::versions_atom_v)
          .receive([&](const sao::msg::RolloutVersions& reply) { versions = reply.running; }, [](const caf::error&) {});
      bool all = versions.size() == 3;
      for (const auto& item : versions) all = all && item.second == version;
      if (all) return true;
      std::this_thread::sleep_for(50ms);
    }
    return false;
  };
  CHECK(versions_converged_to(0));
  sao::model::init_weights(*policy, 2);
  driver->send(weight_sync, weights_of(policy, 1));
  CHECK(versions_converged_to(1));
  // Each rollout reports the version it runs in its own status too.
  for (auto& rollout : rig.rollouts) {
    driver->request(rollout, kHangGuard, sao::atoms::status_atom_v)
        .receive([&](const sao::msg::ActorStatus& status) { CHECK(status.numbers.at("policy_version") == 1); },
                 [](const caf::error&) {});
  }
}

TEST_CASE("weights that do not match their checksum are counted and sent again by the next route") {
  RolloutRig rig;
  auto& driver = rig.driver;
  auto& weight_sync = rig.weight_sync;
  auto& policy = rig.policy;
  // A device pack (on the CPU here): an in-process rollout copies it in
  // place. Its checksum is off by one bit, as if the buffer had changed.
  const auto device_version = [&](int64_t version, bool corrupt) {
    auto packet = sao::weights::device_packet(version, std::make_shared<const sao::model::DevicePackedTensors>(
                                                           sao::model::pack_module_on_device(*policy, torch::kCPU)));
    if (corrupt) packet.checksum ^= 1;
    return packet;
  };
  driver->send(weight_sync, device_version(0, false));
  auto rollout = rig.spawn_rollout(0, 2, "in_flight");
  auto numbers_when = [&](const std::function<bool(const std::map<std::string, double>&)>& done) {
    const auto give_up_at = std::chrono::steady_clock::now() + kHangGuard;
    std::map<std::string, double> numbers;
    while (std::chrono::steady_clock::now() < give_up_at) {
      driver->request(weight_sync, kHangGuard, sao::atoms::status_atom_v)
          .receive([&](const sao::msg::ActorStatus& status) { numbers = status.numbers; }, [](const caf::error&) {});
      if (done(numbers)) break;
      std::this_thread::sleep_for(20ms);
    }
    return numbers;
  };
  const auto at_version = [](int64_t version) {
    return [version](const std::map<std::string, double>& numbers) {
      return numbers.count("version.rollout-0") > 0 && numbers.at("version.rollout-0") == version;
    };
  };
  auto numbers = numbers_when(at_version(0));
  CHECK(numbers.at("pushes_device_copy") == 1);
  CHECK(numbers.at("checksums_verified") == 1);
  CHECK(numbers.at("checksum_mismatches") == 0);
  // v1 by the device copy does not match: the rollout keeps v0, the device
  // copy is refused for it, and v1 comes again as CAF bytes (downloaded),
  // which still carry the wrong checksum: the last route's version stands
  // and the second mismatch is on record too.
  sao::model::init_weights(*policy, 2);
  driver->send(weight_sync, device_version(1, true));
  numbers = numbers_when(at_version(1));
  CHECK(numbers.at("version.rollout-0") == 1);
  CHECK(numbers.at("checksum_mismatches") == 2);
  CHECK(numbers.at("route_refusals") == 1);
  CHECK(numbers.at("pushes_device_copy") == 2);
  CHECK(numbers.at("pushes_caf_bytes") == 1);
  // An honest v2 goes by CAF bytes from now on, and checks out.
  driver->send(weight_sync, device_version(2, false));
  numbers = numbers_when(at_version(2));
  CHECK(numbers.at("pushes_caf_bytes") == 2);
  CHECK(numbers.at("checksums_verified") == 2);
  CHECK(numbers.at("checksum_mismatches") == 2);
  driver->request(rollout, kHangGuard, sao::atoms::status_atom_v)
      .receive([&](const sao::msg::ActorStatus& status) { CHECK(status.numbers.at("policy_version") == 2); },
               [](const caf::error&) {});
}

TEST_CASE("with rollout.weight_delay_versions = 2 the weight-sync actor publishes the version two behind") {
  System s;
  caf::scoped_actor driver{*s.system};
  auto weight_sync = sao::actors::spawn_weight_sync_actor(*s.system, 2);
  sao::model::CausalLM policy(sao_test::tiny_byte_model());
  sao::model::init_weights(*policy, 1);
  auto published_after = [&](int64_t version) {
    driver->send(weight_sync, weights_of(policy, version));
    std::map<std::string, double> numbers;
    driver->request(weight_sync, kHangGuard, sao::atoms::status_atom_v)
        .receive([&](const sao::msg::ActorStatus& status) { numbers = status.numbers; }, [](const caf::error&) {});
    CHECK(numbers.at("received_version") == version);
    CHECK(numbers.at("delay_versions") == 2);
    return numbers.at("latest_version");
  };
  // Until a version two behind exists, the oldest stands in for it.
  CHECK(published_after(0) == 0);
  CHECK(published_after(1) == 0);
  CHECK(published_after(2) == 0);
  CHECK(published_after(3) == 1);
  CHECK(published_after(4) == 2);
  // A skipped version (the learner may publish 5 then 8) still keeps the gap.
  CHECK(published_after(8) == 4);
  caf::anon_send_exit(weight_sync, caf::exit_reason::user_shutdown);
}

namespace {
// The env actor's count of replies it is holding for their latency (-1: no answer).
double replies_held(caf::scoped_actor& self, const sao::actors::EnvActor& env) {
  double held = -1;
  self->request(env, kHangGuard, sao::atoms::status_atom_v)
      .receive([&](const sao::msg::ActorStatus& status) { held = status.numbers.at("replies_held"); },
               [](const caf::error&) {});
  return held;
}
}  // namespace

TEST_CASE("an env actor with latency holds replies without holding its thread") {
  System s;
  caf::scoped_actor self{*s.system};
  SUBCASE("every request of a burst is held at once, not served one after another") {
    sao::actors::EnvActorConfig config{"env-0", "arithmetic", nlohmann::json::object()};
    config.latency.distribution = "fixed";
    config.latency.mean_ms = 600000.0;  // never due within the test
    auto env = sao::actors::spawn_env_actor(*s.system, config);
    for (int64_t id = 1; id <= 4; ++id) self->send(env, sao::msg::EnvReset{id, 7});
    // Mailbox order: the status request is served after the four resets.
    const double held = replies_held(self, env);
    CHECK(held == 4);
    caf::anon_send_exit(env, caf::exit_reason::user_shutdown);
  }
  SUBCASE("a held reply arrives, no sooner than its latency") {
    sao::actors::EnvActorConfig config{"env-0", "arithmetic", nlohmann::json::object()};
    config.latency.distribution = "fixed";
    config.latency.mean_ms = 300.0;
    auto env = sao::actors::spawn_env_actor(*s.system, config);
    const auto sent = std::chrono::steady_clock::now();
    std::string observation;
    self->request(env, kHangGuard, sao::msg::EnvReset{1, 7})
        .receive([&](const sao::msg::EnvReply& reply) { observation = reply.outcome.observation; },
                 [](const caf::error&) {});
    CHECK_FALSE(observation.empty());
    CHECK(std::chrono::steady_clock::now() - sent >= 300ms);  // a lower bound: holds on any machine
    const double held = replies_held(self, env);
    CHECK(held == 0);
    caf::anon_send_exit(env, caf::exit_reason::user_shutdown);
  }
}

TEST_CASE("an env actor turns environment errors into error replies and stays up") {
  System s;
  caf::scoped_actor self{*s.system};
  auto env = sao::actors::spawn_env_actor(*s.system, {"env-0", "arithmetic", nlohmann::json::object()});
  std::string error_text;
  caf::error failure;
  sao::msg::EnvAction step;
  step.episode_id = 42;
  step.action = "1";
  self->request(env, kHangGuard, step)
      .receive([](const sao::msg::EnvReply&) {}, [&](const caf::error& error) { failure = error; });
  CHECK(sao::msg::has_code(failure, sao::msg::Errc::kUnknownEpisode));
  CHECK(sao::msg::error_text(*s.system, failure) == "env-0: step for unknown episode 42");
  bool replied = false;
  self->request(env, kHangGuard, sao::msg::EnvReset{1, 7})
      .receive([&](const sao::msg::EnvReply& reply) { replied = !reply.outcome.observation.empty(); },
               [](const caf::error&) {});
  CHECK(replied);
  // A request whose caller already gave up is not served.
  error_text.clear();
  self->request(env, kHangGuard, sao::msg::EnvReset{2, 7, sao::actors::unix_time_ms() - 1})
      .receive([](const sao::msg::EnvReply&) {}, [&](const caf::error& error) { failure = error; });
  CHECK(sao::msg::has_code(failure, sao::msg::Errc::kRequestExpired));
  CHECK(sao::msg::error_text(*s.system, failure) == "env-0: reset request expired before it was served");
  caf::anon_send_exit(env, caf::exit_reason::user_shutdown);
}

namespace {
// Every reset fails; the number of resets tried is counted (an event count).
std::atomic<int64_t> g_failing_resets{0};
class AlwaysFailingEnv : public sao::env::Environment {
 public:
  sao::env::EnvStep reset(uint64_t) override {
    ++g_failing_resets;
    throw sao::Error("always_failing: the server is down");
  }
  sao::env::EnvStep step(const std::string&) override { throw sao::Error("always_failing: no episode"); }
  std::string name() const override { return "always_failing"; }
};
}  // namespace

TEST_CASE(
    "an env actor whose environment fails max_failures_in_a_row times in a row answers env_dead, calling it no more") {
  sao::env::register_environment(
      "always_failing", [](const nlohmann::json&, const std::string&) { return std::make_unique<AlwaysFailingEnv>(); });
  System s;
  caf::scoped_actor self{*s.system};
  sao::actors::EnvActorConfig config{"env-0", "always_failing", nlohmann::json::object()};
  config.max_failures_in_a_row = 3;
  auto env = sao::actors::spawn_env_actor(*s.system, config);
  std::vector<std::string> codes;
  std::vector<std::string> texts;
  for (int64_t id = 1; id <= 5; ++id) {
    self->request(env, kHangGuard, sao::msg::EnvReset{id, 7})
        .receive([&](const sao::msg::EnvReply&) { codes.push_back("reply"); },
                 [&](const caf::error& error) {
                   codes.push_back(sao::msg::has_code(error, sao::msg::Errc::kEnvDead)     ? "env_dead"
                                   : sao::msg::has_code(error, sao::msg::Errc::kEnvFailed) ? "env_failed"
                                                                                           : "other");
                   texts.push_back(sao::msg::error_text(*s.system, error));
                 });
  }
  CHECK(codes == std::vector<std::string>{"env_failed", "env_failed", "env_dead", "env_dead", "env_dead"});
  CHECK(g_failing_resets.load() == 3);  // not 5: a dead environment is not called again
  const std::string dead =
      "env-0: environment 'always_failing' is dead: 3 consecutive failures (train.max_env_failures_in_a_row 3); the "
      "last: reset failed: always_failing: the server is down";
  REQUIRE(texts.size() == 5);
  CHECK(texts[0] == "env-0: reset failed: always_failing: the server is down");
  CHECK(texts[2] == dead);
  CHECK(texts[4] == dead);
  caf::anon_send_exit(env, caf::exit_reason::user_shutdown);
}

namespace {
// Empty observation at reset; any action ends the episode with info
// {"success": true} and no accuracy (see tests/test_rollout_episode.cpp).
class SuccessOnlyEnv : public sao::env::Environment {
 public:
  sao::env::EnvStep reset(uint64_t) override { return {"", 0.0, false, false, nlohmann::json::object()}; }
  sao::env::EnvStep step(const std::string&) override {
    return {"", 1.0, true, false, nlohmann::json{{"success", true}, {"regime_index", 3}}};
  }
  std::string name() const override { return "success_only"; }
};
}  // namespace

TEST_CASE("the rollout actor plays episodes by the shared rules: <|obs|> for an empty reset, success as accuracy") {
  sao::env::register_environment(
      "success_only", [](const nlohmann::json&, const std::string&) { return std::make_unique<SuccessOnlyEnv>(); });
  System s;
  auto& system = *s.system;
  caf::scoped_actor replay{system};
  caf::scoped_actor driver{system};
  auto weight_sync = sao::actors::spawn_weight_sync_actor(system);
  auto env = sao::actors::spawn_env_actor(system, {"env-0", "success_only", nlohmann::json::object()});
  sao::model::CausalLM policy(sao_test::tiny_byte_model());
  sao::model::init_weights(*policy, 1);
  driver->send(weight_sync, weights_of(policy, 0));
  sao::actors::RolloutActorConfig config;
  config.name = "rollout-0";
  config.model = sao_test::tiny_byte_model();
  config.rollout.slots = 2;
  config.rollout.max_new_tokens = 3;
  config.env = env;
  config.replay = caf::actor_cast<sao::actors::ReplayActor>(replay);
  config.weight_sync = weight_sync;
  config.coordinator = caf::actor_cast<sao::actors::CoordinatorActor>(driver);
  auto rollout = sao::actors::spawn_rollout_actor(system, config);
  const sao::tokenizer::ByteTokenizer tokenizer;
  std::vector<sao::algo::Trajectory> received;
  bool timed_out = false;
  while (received.size() < 2 && !timed_out) {
    replay->receive(
        [&](const sao::algo::Trajectory& trajectory) -> sao::msg::ReplayAck {
          received.push_back(trajectory);
          return {true, 0, false, 64, true};  // consumed at once: always room
        },
        caf::after(60s) >> [&] { timed_out = true; });
  }
  caf::anon_send_exit(rollout, caf::exit_reason::user_shutdown);
  for (const auto& actor : {weight_sync.address(), env.address()})
    caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
  REQUIRE_FALSE(timed_out);
  for (const auto& trajectory : received) {
    REQUIRE(trajectory.tokens.size() >= 3);
    CHECK(trajectory.tokens[0] == tokenizer.bos_id());
    CHECK(trajectory.tokens[1] == *tokenizer.special_id("<|obs|>"));
    CHECK(trajectory.accuracy == 1.0);
    CHECK(trajectory.origin.rollout == "rollout-0");
    CHECK(trajectory.origin.turns == 1);
    CHECK(trajectory.origin.regime_index == 3.0);
    CHECK(trajectory.origin.finished_at_ns > 0);
  }
}
