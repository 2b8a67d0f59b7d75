// End-to-end runs of the actor runtime on a tiny model: SAO raises reward
// on an easy task and writes every public metric; GRPO-sync never mixes
// policy versions in a batch; an environment that throws or hangs is
// restarted, the lost episodes are counted and the run finishes; and no
// actor is left running afterwards.
#include "actors/train.hpp"
#include "config/run_config.hpp"
#include "env/tasks/arithmetic_env.hpp"
#include "env/environment.hpp"
#include "model/checkpoint.hpp"
#include "tokenizer/byte_tokenizer.hpp"
#include "train/task_runner.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

namespace fs = std::filesystem;

namespace {

const char* kRequiredKeys[] = {"step",
                               "policy_version",
                               "wall_time_s",
                               "trajectories",
                               "tokens",
                               "reward_mean",
                               "batch_accuracy",
                               "policy_loss",
                               "value_loss",
                               "explained_variance",
                               "entropy",
                               "dis_reject_low_frac",
                               "dis_reject_high_frac",
                               "ratio_mean",
                               "ratio_max",
                               "staleness_mean",
                               "staleness_max",
                               "dropped_stale",
                               "grad_norm",
                               "learner_idle_ms",
                               "rollout_to_learner_ms",
                               "tokens_per_s"};

// 1-digit addition on a tiny model: learnable in seconds, so RL has signal.
sao::config::RunConfig easy_config(const std::string& run_dir, const std::vector<std::string>& extra) {
  std::vector<std::string> overrides = {
      "run.dir=\"" + run_dir + "\"",
      "threads.torch_intra_op=1",
      "model.hidden_size=64",
      "model.intermediate_size=128",
      "model.num_hidden_layers=2",
      "model.num_attention_heads=4",
      "model.num_key_value_heads=2",
      "model.max_position_embeddings=32",
      "task.min_digits=1",
      "task.max_digits=1",
      "task.operators=\"+\"",
      "task.test_size=8",
      // A plain-answer teacher: 4 new tokens leave no room for a worked answer.
      "task.demonstration_worked_rate=0",
      "sft.curriculum=[]",
      "sft.steps=150",
      "sft.batch_size=32",
      "sft.learning_rate=0.003",
      "sft.log_every=1000",
      "eval.max_new_tokens=4",
      "rollout.max_new_tokens=4",
      "rollout.slots=32",
      "train.eval_every=0",
      "train.checkpoint_every=0",
      "learner.actor_lr=0.0005",
      "learner.critic_lr=0.005",
      "learner.critic_warmup_steps=3",
  };
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return sao::config::load_run_config("", overrides);
}

sao::model::CausalLM warm_start(const sao::config::RunConfig& config) {
  sao::model::CausalLM policy(config.model);
  sao::model::init_weights(*policy, 1);
  sao::train::run_warm_start(policy, config, nullptr);
  return policy;
}

std::vector<nlohmann::json> read_lines(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

std::vector<nlohmann::json> step_lines(const std::string& run_dir) {
  std::vector<nlohmann::json> steps;
  for (auto& line : read_lines(run_dir + "/metrics.jsonl")) {
    if (!line.contains("eval")) steps.push_back(line);
  }
  return steps;
}

fs::path fresh_dir(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("sao_slow_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

double mean_reward(const std::vector<nlohmann::json>& steps, size_t begin, size_t end) {
  double sum = 0.0;
  for (size_t i = begin; i < end; ++i) sum += steps[i]["reward_mean"].get<double>();
  return sum / static_cast<double>(end - begin);
}

// Throws on one episode in five and hangs on one in seven: 3 s, past the
// rollout's budget for any request of the test's batch of 4 (env_timeout_ms
// 300 for each request queued ahead, so at most 1.2 s).
class FlakyEnvironment final : public sao::env::Environment {
 public:
  explicit FlakyEnvironment(const nlohmann::json& config, const std::string& where)
      : inner_(sao::env::arithmetic_config_from_json(config, where)) {}
  sao::env::EnvStep reset(uint64_t seed) override {
    seed_ = seed;
    return inner_.reset(seed);
  }
  sao::env::EnvStep step(const std::string& action) override {
    if (seed_ % 5 == 0) throw std::runtime_error("flaky environment failed on purpose");
    if (seed_ % 7 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(3000));
    return inner_.step(action);
  }
  std::string name() const override { return "flaky"; }
  // The warm start's demonstrations are arithmetic's; no held-out split, so
  // the evaluations never meet the failures.
  std::vector<sao::env::SftEpisode> demonstrations(int64_t count, uint64_t seed) const override {
    return inner_.demonstrations(count, seed);
  }

 private:
  sao::env::ArithmeticEnvironment inner_;
  uint64_t seed_ = 0;
};

}  // namespace

TEST_CASE("SAO through the actors raises reward on an easy task and writes every metric") {
  const auto dir = fresh_dir("sao");
  // Exactly 64 trajectories a step, so what the run learns does not depend
  // on how fast the machine delivers rollouts (with min_batch alone a loaded
  // machine handed over larger batches and a fast one smaller ones). History
  // of the bar: 32 a step for 80 steps gave +0.147 to +0.166 on the old
  // lockstep rollout, but that was one warm start (the SFT stream is fixed by
  // its seed) and one that happened to suit it; with the rollout engine and
  // 160 steps that warm start gave +0.09 to +0.23 over ten runs. Since the
  // warm start became arithmetic's own demonstrations (issue #50: every
  // environment's SFT takes one path) the warm start is another draw, and at
  // 32 a step it gave +0.21, +0.15, +0.03 and -0.06: too few trajectories a
  // step for a stable gain. At 64 a step for 120 steps it gave +0.12 to
  // +0.25 in seven runs here but +0.077 in a clean-clone CI run under
  // ctest -j2; the reward keeps climbing after that, and 200 steps gave +0.34
  // and +0.23 (two side by side on 2 cores). lr 3e-4 at 32 a step gave only
  // +0.07 to +0.10. With the policy held still (actor_lr 1e-9, 32 a step)
  // the difference was -0.003 and -0.008; two 1,280-episode means differ by
  // about 0.02 by chance. The 0.05 checked sits between the two.
  auto config =
      easy_config(dir.string(), {"train.steps=200", "replay.min_batch=64", "replay.max_batch=64", "rollout.slots=64"});
  auto policy = warm_start(config);
  const auto outcome = sao::actors::run_training(config, policy, "", nullptr);
  CHECK(outcome.reason == "budget");
  CHECK(outcome.steps == 200);
  CHECK(outcome.actors_left_running == 0);
  const auto steps = step_lines(dir.string());
  REQUIRE(steps.size() == 200);
  for (const auto& line : steps) {
    for (const char* key : kRequiredKeys) CHECK_MESSAGE(line.contains(key), key);
    CHECK(line["trajectories"] == 64);
  }
  // Critic warm-up: the policy version stays 0 for the first 3 steps, then counts actor updates.
  CHECK(steps[2]["policy_version"] == 0);
  CHECK(steps.back()["policy_version"] == 197);
  const double early = mean_reward(steps, 0, 20);
  const double late = mean_reward(steps, 180, 200);
  MESSAGE("reward of the first 20 steps " << early << ", of the last 20 " << late);
  CHECK(late > early + 0.05);
  // Evaluation lines before the first step and at the end.
  std::vector<nlohmann::json> evals;
  for (auto& line : read_lines(dir.string() + "/metrics.jsonl")) {
    if (line.contains("eval")) evals.push_back(line);
  }
  REQUIRE(evals.size() == 2);
  CHECK(evals.front()["step"] == 0);
  CHECK(evals.back()["step"] == 200);
  // Arithmetic evaluations count worked answers ("w..>"); demonstrations
  // here never show one, so neither does the greedy policy.
  CHECK(evals.front()["count_worked"] == 0);
  CHECK(evals.back()["count_worked"] == 0);
  std::ifstream summary_file(dir / "summary.json");
  const auto summary = nlohmann::json::parse(summary_file);
  CHECK(summary["count_worked_first"] == 0);
  CHECK(summary["count_worked_last"] == 0);
  CHECK(fs::exists(dir / "checkpoint" / "policy" / "model.safetensors"));
  CHECK(fs::exists(dir / "checkpoint" / "learner"));
  fs::remove_all(dir);
}

TEST_CASE("GRPO-sync never mixes policy versions within a batch") {
  const auto dir = fresh_dir("grpo_sync");
  auto config = easy_config(dir.string(), {"train.steps=8", "train.mode=\"sync\"", "learner.algorithm=\"grpo\"",
                                           "learner.group_size=4", "rollout.num_actors=2", "rollout.slots=8"});
  CHECK(config.replay.synchronous);
  CHECK(config.replay.max_batch == 16);
  auto policy = warm_start(config);
  const auto outcome = sao::actors::run_training(config, policy, "", nullptr);
  CHECK(outcome.steps == 8);
  CHECK(outcome.actors_left_running == 0);
  const auto steps = step_lines(dir.string());
  REQUIRE(steps.size() == 8);
  for (const auto& line : steps) {
    CHECK(line["trajectories"] == 16);
    CHECK(line["staleness_max"] == 0);  // every token came from the version being trained
  }
  // Time accounting in summary.json: every actor's work, one node, threads.
  const auto summary = nlohmann::json::parse(outcome.summary_json);
  REQUIRE(summary.contains("time_accounting"));
  const auto& accounting = summary["time_accounting"];
  MESSAGE("time accounting: " << accounting.dump());
  std::map<std::string, nlohmann::json> by_kind;
  for (const auto& actor : accounting["actors"]) by_kind[actor["kind"].get<std::string>()] = actor;
  for (const char* kind : {"coordinator", "learner", "replay", "weight_sync", "metrics", "rollout", "env"}) {
    CHECK_MESSAGE(by_kind.count(kind) == 1, std::string(kind));
  }
  const auto& learner = by_kind["learner"];
  CHECK(learner["work"]["model"]["calls"].get<int64_t>() >= 8);  // 8 steps, plus evaluations
  // One serialisation for the initial weights and one per update.
  CHECK(learner["work"]["weights"]["calls"].get<int64_t>() == 9);
  CHECK(learner["busy_frac"].get<double>() > 0.0);
  CHECK(learner["busy_frac"].get<double>() <= 1.0);
  CHECK(by_kind["rollout"]["work"]["model"]["calls"].get<int64_t>() > 0);
  // Each trained single-turn episode took one reset and one step.
  CHECK(by_kind["env"]["work"]["env"]["calls"].get<int64_t>() >= 2 * 8 * 16);
  CHECK(by_kind["replay"]["work"].empty());
  REQUIRE(accounting["nodes"].size() == 1);
  const auto& node = accounting["nodes"].begin().value();
  CHECK(node["process_cpu_s"].get<double>() > node["model_cpu_s"].get<double>());
  CHECK(node["other_cpu_share"].get<double>() >= 0.0);
  CHECK(node["other_cpu_share"].get<double>() < 1.0);
  CHECK(accounting["threads_cpu_s"]["caf.actor.threads"].get<double>() >= 3.0);  // learner, rollout, env
  fs::remove_all(dir);
}

// The synchronous barrier waits for new weights; a critic warm-up step makes
// none, so this run hung after its first step until the coordinator learnt to
// release rounds after steps that leave the policy as it was.
TEST_CASE("SAO in sync mode trains through its critic warm-up, one round of one version per step") {
  const auto dir = fresh_dir("sao_sync");
  auto config =
      easy_config(dir.string(), {"train.steps=7", "train.mode=\"sync\"", "rollout.num_actors=2", "rollout.slots=8"});
  REQUIRE(config.learner.critic_warmup_steps == 3);
  auto policy = warm_start(config);
  const auto outcome = sao::actors::run_training(config, policy, "", nullptr);
  CHECK(outcome.reason == "budget");
  CHECK(outcome.steps == 7);
  CHECK(outcome.actors_left_running == 0);
  const auto steps = step_lines(dir.string());
  REQUIRE(steps.size() == 7);
  for (size_t i = 0; i < steps.size(); ++i) {
    CHECK(steps[i]["trajectories"] == 16);
    CHECK(steps[i]["staleness_max"] == 0);
    CHECK(steps[i]["critic_only"] == (i < 3 ? 1.0 : 0.0));
    // Versions 0, 0, 0 through the warm-up, then one per actor update.
    CHECK(steps[i]["policy_version"] == (i < 3 ? 0 : static_cast<int>(i) - 2));
  }
  fs::remove_all(dir);
}

// A rollout used to start its next session before replay had answered for
// the last one, so it saw an old "not full" and queued a session past the
// capacity: trajectories then waited two learner steps instead of one.
TEST_CASE("a metrics file that cannot be written ends the run through its finish, checkpoint saved") {
  // A full disk: every write to metrics.jsonl fails, so the metrics actor's
  // first line throws and the actor exits. Before the coordinator watched it,
  // the run waited forever for it (the console test hung 600 s).
  const auto dir = fresh_dir("disk_full");
  fs::create_directories(dir);
  fs::create_symlink("/dev/full", dir / "metrics.jsonl");
  auto config = easy_config(dir.string(), {"train.steps=1000000", "train.checkpoint_every=0"});
  auto policy = warm_start(config);
  const auto outcome = sao::actors::run_training(config, policy, "", nullptr);
  CHECK(outcome.failed);
  CHECK(outcome.reason.find("the metrics actor exited") != std::string::npos);
  CHECK(outcome.steps < 1000000);
  CHECK(outcome.actors_left_running == 0);
  // The learner's finish still ran: the final checkpoint is there.
  CHECK(fs::exists(dir / "checkpoint" / "policy" / "model.safetensors"));
  fs::remove_all(dir);
}

TEST_CASE("one rollout never queues past the replay's capacity") {
  const auto dir = fresh_dir("replay_room");
  auto config = easy_config(dir.string(), {"train.steps=30", "rollout.slots=16", "replay.capacity=32",
                                           "replay.max_batch=32", "replay.max_staleness=-1"});
  auto policy = warm_start(config);
  const auto outcome = sao::actors::run_training(config, policy, "", nullptr);
  CHECK(outcome.reason == "budget");
  const auto steps = step_lines(dir.string());
  REQUIRE(steps.size() == 30);
  int64_t handed_out = 0;
  for (const auto& step : steps) {
    // What the replay held when the learner took its batch.
    const auto held = step["trajectories"].get<int64_t>() + step["queued_after"].get<int64_t>();
    CHECK(held <= 32);
    handed_out += step["trajectories"].get<int64_t>();
  }
  CHECK(handed_out >= 30);
  fs::remove_all(dir);
}

// A session larger than the room left must still start when the learner
// cannot step without it (fewer than min_batch held): waiting for room there
// would stop the run for good.
TEST_CASE("a rollout starts a session that overfills the replay when the learner needs more") {
  const auto dir = fresh_dir("replay_starved");
  auto config = easy_config(dir.string(), {"train.steps=8", "rollout.slots=24", "replay.capacity=32",
                                           "replay.min_batch=32", "replay.max_batch=32", "replay.max_staleness=-1"});
  auto policy = warm_start(config);
  const auto outcome = sao::actors::run_training(config, policy, "", nullptr);
  CHECK(outcome.reason == "budget");
  const auto steps = step_lines(dir.string());
  REQUIRE(steps.size() == 8);
  for (const auto& step : steps) CHECK(step["trajectories"] == 32);
  fs::remove_all(dir);
}

TEST_CASE("an environment that throws or hangs is restarted; lost episodes are counted and the run continues") {
  sao::env::register_environment("flaky", [](const nlohmann::json& config, const std::string& where) {
    return std::make_unique<FlakyEnvironment>(config, where);
  });
  const auto dir = fresh_dir("flaky");
  auto config = easy_config(dir.string(),
                            {"train.steps=12", "env.name=\"flaky\"", "rollout.env_timeout_ms=300", "rollout.slots=4",
                             // restarts are this test's point, not a reason to give up;
                             // under load, queued requests expire and many episodes are
                             // lost between two learner steps (200 in a row happened once)
                             "train.max_actor_failures=1000000", "train.max_lost_in_a_row=0"});
  // train.max_env_failures_in_a_row stays at its default (5) and cannot trip:
  // only steps throw here, a session holds 4 episodes, and each failed step
  // is followed by resets, which succeed, before the next session's steps.
  auto policy = warm_start(config);
  const auto outcome = sao::actors::run_training(config, policy, "", nullptr);
  CHECK(outcome.reason == "budget");
  CHECK(outcome.steps == 12);
  CHECK(outcome.actors_left_running == 0);
  const auto summary = nlohmann::json::parse(outcome.summary_json);
  MESSAGE("summary: " << summary.dump());
  CHECK(summary["episodes_lost"].get<int64_t>() > 0);
  CHECK(summary["env_restarts"].get<int64_t>() > 0);
  fs::remove_all(dir);
}

TEST_CASE("a stop request ends the run with a final checkpoint") {
  const auto dir = fresh_dir("stop");
  auto config = easy_config(dir.string(), {"train.steps=100000"});
  auto policy = warm_start(config);
  std::atomic<bool> stop{false};
  // Stop once the first learner step is on disk: an event, not a delay, so a
  // slow machine cannot stop the run before it has trained at all.
  std::thread stopper([&] {
    const auto metrics = dir / "metrics.jsonl";
    for (;;) {
      std::ifstream in(metrics);
      std::string line;
      bool stepped = false;
      while (std::getline(in, line)) stepped = stepped || line.find("\"policy_loss\"") != std::string::npos;
      if (stepped) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    stop.store(true);
  });
  const auto outcome = sao::actors::run_training(config, policy, "", &stop);
  stopper.join();
  CHECK(outcome.reason == "stopped on request");
  CHECK(outcome.steps > 0);
  CHECK(outcome.steps < 100000);
  CHECK(outcome.actors_left_running == 0);
  CHECK(fs::exists(dir / "checkpoint" / "policy" / "model.safetensors"));
  // Resume: the learner continues from its saved step count to the new budget.
  auto resumed_config = easy_config(dir.string(), {"train.steps=" + std::to_string(outcome.steps + 5)});
  auto resumed_policy = sao::model::load_policy_checkpoint((dir / "checkpoint" / "policy").string());
  const auto resumed =
      sao::actors::run_training(resumed_config, resumed_policy, (dir / "checkpoint" / "learner").string(), nullptr);
  CHECK(resumed.reason == "budget");
  CHECK(resumed.steps == outcome.steps + 5);
  // The policy version counts actor updates: none in the 3 critic warm-up
  // steps. The stop can land inside the warm-up (a loaded machine processes
  // it after step 1), so the expected versions follow from the step counts.
  const auto actor_updates = [](int64_t steps) { return std::max<int64_t>(0, steps - 3); };
  CHECK(outcome.policy_version == actor_updates(outcome.steps));
  CHECK(resumed.policy_version == actor_updates(resumed.steps));
  fs::remove_all(dir);
}
