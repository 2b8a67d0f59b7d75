// A learner in a long job is shown as busy with what it does, at once:
// while its (detached) thread is held inside the held-out evaluation, the
// introspection snapshot reports state "busy" and "evaluating, step 0"
// instead of waiting out the status timeout and calling it "unresponsive".
// The evaluation is held by the test's own gate, not by a sleep.
#include "actors/console/introspection_actor.hpp"
#include "actors/protocol.hpp"
#include "actors/run/learner_actor.hpp"
#include "config/run_config.hpp"
#include "env/environment.hpp"
#include "test_tiny_model.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <memory>

using namespace std::chrono_literals;

namespace {

// A hang guard: an event that comes at all comes long before this.
constexpr auto kHangGuard = 120s;

// Held-out episode 0 waits at reset until the test opens the gate, and says
// when it has begun waiting.
struct EvaluationGate {
  std::promise<void> entered;
  std::promise<void> open;
  std::shared_future<void> opened = open.get_future().share();
};
EvaluationGate* gate = nullptr;

class HeldAtEvaluationEnv : public sao::env::Environment {
 public:
  sao::env::EnvStep reset(uint64_t) override { return {"q", 0.0, false, false, nlohmann::json::object()}; }
  sao::env::EnvStep step(const std::string&) override { return {"", 1.0, true, false, nlohmann::json::object()}; }
  std::string name() const override { return "held_at_evaluation"; }
  int64_t heldout_size() const override { return 1; }
  sao::env::EnvStep reset_heldout(int64_t) override {
    gate->entered.set_value();
    gate->opened.wait();
    return {"q", 0.0, false, false, nlohmann::json::object()};
  }
};

}  // namespace

TEST_CASE("a learner held in its evaluation shows as busy, evaluating at step 0, and as idle after it") {
  sao::env::register_environment("held_at_evaluation", [](const nlohmann::json&, const std::string&) {
    return std::make_unique<HeldAtEvaluationEnv>();
  });
  EvaluationGate held;
  gate = &held;
  caf::actor_system_config system_config;
  sao::actors::register_protocol(system_config);
  caf::actor_system system{system_config};

  sao::config::RunConfig run;
  run.env.name = "held_at_evaluation";
  run.task_document = nlohmann::json::object();
  run.rollout.max_new_tokens = 2;
  run.eval.batch_size = 1;
  sao::model::CausalLM policy(sao_test::tiny_byte_model());
  sao::model::init_weights(*policy, 1);
  auto learner = sao::actors::spawn_learner_actor(system, {run, policy, "", nullptr});
  // The coordinator's one job here: list the learner for the snapshot.
  auto coordinator = system.spawn([learner](caf::event_based_actor*) -> caf::behavior {
    return {[learner](sao::atoms::actors_atom) {
      return caf::make_message(
          std::vector<sao::actors::StatusActor>{caf::actor_cast<sao::actors::StatusActor>(learner)},
          std::vector<std::string>{"learner"});
    }};
  });
  auto introspection =
      sao::actors::spawn_introspection_actor(system, caf::actor_cast<sao::actors::CoordinatorActor>(coordinator));
  caf::scoped_actor sink{system};  // stands in for replay, weight sync and metrics
  caf::scoped_actor asker{system};
  asker->send(learner, sao::atoms::start_atom_v, caf::actor_cast<sao::actors::ReplayActor>(sink),
              caf::actor_cast<sao::actors::WeightSyncActor>(sink), caf::actor_cast<sao::actors::MetricsActor>(sink),
              caf::actor_cast<sao::actors::CoordinatorActor>(coordinator));
  held.entered.get_future().wait();  // the learner's thread is inside the evaluation now

  auto snapshot = [&] {
    std::vector<sao::msg::ActorStatus> statuses;
    asker->request(introspection, kHangGuard, sao::atoms::snapshot_atom_v)
        .receive([&](std::vector<sao::msg::ActorStatus>& got) { statuses = std::move(got); },
                 [&](const caf::error& error) { FAIL(system.render(error)); });
    REQUIRE(statuses.size() == 1);
    return statuses[0];
  };
  const auto busy = snapshot();
  CHECK(busy.name == "learner");
  CHECK(busy.kind == "learner");
  CHECK(busy.state == "busy");
  CHECK(busy.activity == "evaluating, step 0");
  // What the learner last said of itself, from the job's start: its counters
  // and numbers stay visible while it is busy.
  CHECK(busy.numbers.at("step") == 0.0);
  CHECK(busy.numbers.count("actor_lr") == 1);
  CHECK(busy.messages_handled == 1);  // the start message
  CHECK(busy.last_error.empty());

  held.open.set_value();
  // The learner answers its mailbox again once the evaluation is over.
  sao::msg::ActorStatus own;
  asker->request(learner, kHangGuard, sao::atoms::status_atom_v)
      .receive([&](sao::msg::ActorStatus& status) { own = std::move(status); },
               [&](const caf::error& error) { FAIL(system.render(error)); });
  CHECK(own.state == "idle");
  CHECK(own.activity.empty());
  const auto after = snapshot();
  CHECK(after.state == "idle");
  CHECK(after.activity.empty());

  for (const auto& actor : {learner.address(), coordinator.address(), introspection.address()})
    caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
  gate = nullptr;
}

TEST_CASE("the snapshot lists learner ranks 1..N-1 from the learner's status, with their share of the step") {
  sao::msg::ActorStatus learner;
  learner.name = "learner";
  learner.kind = "learner";
  learner.state = "training";
  learner.numbers = {{"ranks", 3},
                     {"rank0_tokens", 500},
                     {"rank1_tokens", 480},
                     {"rank1_compute_s", 0.7},
                     {"rank1_allreduce_s", 0.05},
                     {"rank2_tokens", 510}};
  sao::msg::ActorStatus replay;
  replay.name = "replay";
  replay.kind = "replay";
  std::vector<sao::msg::ActorStatus> statuses = {learner, replay};
  sao::actors::add_learner_ranks(statuses);
  REQUIRE(statuses.size() == 4);
  CHECK(statuses[2].name == "learner-rank-1");
  CHECK(statuses[2].kind == "learner-rank");
  CHECK(statuses[2].state == "training");
  CHECK(statuses[2].node == "rank 1 of 3 (follows learner over c10d)");
  CHECK(statuses[2].numbers.at("tokens") == 480);
  CHECK(statuses[2].numbers.at("compute_s") == 0.7);
  CHECK(statuses[2].numbers.at("allreduce_s") == 0.05);
  CHECK(statuses[3].name == "learner-rank-2");
  CHECK(statuses[3].numbers.at("tokens") == 510);
  CHECK(statuses[3].numbers.count("compute_s") == 0);  // not reported: not invented
  // One rank: nothing added.
  std::vector<sao::msg::ActorStatus> alone = {replay};
  learner.numbers = {{"ranks", 1}};
  alone.push_back(learner);
  sao::actors::add_learner_ranks(alone);
  CHECK(alone.size() == 2);
}
