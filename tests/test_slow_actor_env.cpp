// Multi-turn environments through the real actors, on a tiny model:
//   - the pieces (env actor, rollout actor, weight-sync actor, with this test
//     playing replay) produce maze trajectories whose every turn matches what
//     the environment saw and said: observation bytes are masked out of the
//     action mask, action tokens carry a weight version, and each turn's
//     reward sits on that turn's last action token (the final reward on the
//     last one);
//   - a whole SAO run (run_training) on the maze finishes on budget, writes
//     step lines and leaves no actor running;
//   - the same for an external environment (deploy/envs/guess_number.py) and
//     for OpenEnv servers (tests/openenv/guess_server.py, WebSocket sessions).
#include "actors/run/env_actor.hpp"
#include "actors/protocol.hpp"
#include "actors/run/rollout_actor.hpp"
#include "actors/train.hpp"
#include "actors/run/weight_sync_actor.hpp"
#include "config/run_config.hpp"
#include "env/environment.hpp"
#include "model/tensor_blob.hpp"
#include "test_openenv_server.hpp"
#include "tokenizer/byte_tokenizer.hpp"
#include "train/task_runner.hpp"

#include <doctest/doctest.h>

#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

const std::string kGuessNumber = std::string(SAO_SOURCE_DIR) + "/deploy/envs/guess_number.py";

std::vector<std::string> tiny_model_overrides(const std::string& run_dir) {
  return {
      "run.dir=\"" + run_dir + "\"",
      "model.hidden_size=64",
      "model.intermediate_size=128",
      "model.num_hidden_layers=2",
      "model.num_attention_heads=4",
      "model.num_key_value_heads=2",
      "model.max_position_embeddings=128",
      "sft.batch_size=32",
      "sft.learning_rate=0.003",
      "sft.warmup_steps=5",
      "sft.log_every=1000",
      "eval.max_new_tokens=3",
      "rollout.max_new_tokens=3",
      "train.eval_every=0",
      "train.checkpoint_every=0",
      "learner.actor_lr=0.0005",
      "learner.critic_lr=0.005",
      "learner.critic_warmup_steps=2",
  };
}

// The maze (5x5, 3..6 moves, turn limit = distance + 4 <= 10), the agentic preset.
sao::config::RunConfig maze_config(const std::string& run_dir, const std::vector<std::string>& extra) {
  auto overrides = tiny_model_overrides(run_dir);
  for (const char* item :
       {"env.name=\"maze\"", "task={\"name\":\"maze\",\"heldout_size\":40}", "sft.steps=80", "rollout.max_turns=10",
        "rollout.slots=16", "learner.dis_eps_low=0.8", "learner.dis_eps_high=3.0"}) {
    overrides.emplace_back(item);
  }
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return sao::config::load_run_config("", overrides);
}

sao::model::CausalLM clone(const sao::model::CausalLM& policy, const sao::model::ModelConfig& config) {
  sao::model::CausalLM copy(config);
  sao::model::load_packed_into_module(*copy, sao::model::pack_module(*policy), "clone");
  return copy;
}

// One short maze warm start shared by the test cases (each gets a copy).
const sao::model::CausalLM& warm_maze_policy() {
  static sao::model::CausalLM policy = [] {
    const auto config = maze_config("/tmp/unused", {});
    sao::model::CausalLM fresh(config.model);
    sao::model::init_weights(*fresh, 1);
    sao::train::run_warm_start(fresh, config, nullptr);
    return fresh;
  }();
  return policy;
}

std::vector<nlohmann::json> step_lines(const fs::path& run_dir) {
  std::vector<nlohmann::json> steps;
  std::ifstream in(run_dir / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto parsed = nlohmann::json::parse(line);
    if (!parsed.contains("eval")) steps.push_back(parsed);
  }
  return steps;
}

fs::path fresh_dir(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("sao_slow_env_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

// What an environment saw and said in one episode.
struct Transcript {
  std::string prompt;
  std::vector<std::string> actions;
  std::vector<std::string> observations;  // after each action ("" after the last)
  std::vector<double> rewards;
};

std::mutex transcripts_mutex;
std::vector<Transcript> transcripts;

// The maze, recording every finished episode's transcript.
class RecordingMaze final : public sao::env::Environment {
 public:
  RecordingMaze(const nlohmann::json& config, const std::string& where)
      : inner_(sao::env::make_environment("maze", config, where)) {}
  sao::env::EnvStep reset(uint64_t seed) override {
    auto step = inner_->reset(seed);
    current_ = Transcript{};
    current_.prompt = step.observation;
    return step;
  }
  sao::env::EnvStep step(const std::string& action) override {
    auto step = inner_->step(action);
    current_.actions.push_back(action);
    current_.observations.push_back(step.done() ? "" : step.observation);
    current_.rewards.push_back(step.reward);
    if (step.done()) {
      std::lock_guard<std::mutex> lock(transcripts_mutex);
      transcripts.push_back(current_);
    }
    return step;
  }
  std::string name() const override { return "recording_maze"; }
  sao::env::EnvLimits limits() const override { return inner_->limits(); }

 private:
  std::unique_ptr<sao::env::Environment> inner_;
  Transcript current_;
};

// A trajectory cut back into its parts: maximal runs of action tokens are the
// turns' actions, the runs of non-action tokens between them observations.
struct Segments {
  std::vector<int64_t> prompt;
  std::vector<std::vector<int64_t>> actions;
  std::vector<std::vector<int64_t>> observations;
  std::vector<size_t> action_ends;  // index of each action's last token
};

Segments split(const sao::algo::Trajectory& t) {
  Segments s;
  size_t i = 0;
  while (i < t.size() && t.action_mask[i] == 0) s.prompt.push_back(t.tokens[i++]);
  while (i < t.size()) {
    s.actions.emplace_back();
    while (i < t.size() && t.action_mask[i] == 1) s.actions.back().push_back(t.tokens[i++]);
    s.action_ends.push_back(i - 1);
    s.observations.emplace_back();
    while (i < t.size() && t.action_mask[i] == 0) s.observations.back().push_back(t.tokens[i++]);
  }
  return s;
}

}  // namespace

TEST_CASE("maze episodes through env, rollout and weight-sync actors are multi-turn and masked exactly") {
  sao::env::register_environment("recording_maze", [](const nlohmann::json& config, const std::string& where) {
    return std::make_unique<RecordingMaze>(config, where);
  });
  const auto config = maze_config("/tmp/unused", {});
  const auto& policy = warm_maze_policy();

  caf::actor_system_config system_config;
  sao::actors::register_protocol(system_config);
  caf::actor_system system{system_config};
  caf::scoped_actor replay{system};  // this test plays replay
  caf::scoped_actor driver{system};  // ... and the coordinator
  auto weight_sync = sao::actors::spawn_weight_sync_actor(system);
  auto env = sao::actors::spawn_env_actor(system, {"env-0", "recording_maze", config.task_document});
  driver->send(weight_sync, sao::weights::host_packet(0, sao::model::pack_module(*policy)));
  sao::actors::RolloutActorConfig rollout_config;
  rollout_config.name = "rollout-0";
  rollout_config.model = config.model;
  rollout_config.rollout = config.rollout;
  rollout_config.rollout.slots = 8;
  rollout_config.env = env;
  rollout_config.replay = caf::actor_cast<sao::actors::ReplayActor>(replay);
  rollout_config.weight_sync = weight_sync;
  rollout_config.coordinator = caf::actor_cast<sao::actors::CoordinatorActor>(driver);
  auto rollout = sao::actors::spawn_rollout_actor(system, rollout_config);

  std::vector<sao::algo::Trajectory> received;
  bool timed_out = false;
  while (received.size() < 12 && !timed_out) {
    replay->receive(
        [&](const sao::algo::Trajectory& message) -> sao::msg::ReplayAck {
          received.push_back(message);
          return {true, 0, false, 64, true};  // consumed at once: always room
        },
        caf::after(120s) >> [&] { timed_out = true; });
  }
  caf::anon_send_exit(rollout, caf::exit_reason::user_shutdown);
  for (const auto& actor : {weight_sync.address(), env.address()})
    caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
  REQUIRE_FALSE(timed_out);

  std::vector<Transcript> recorded;
  {
    std::lock_guard<std::mutex> lock(transcripts_mutex);
    recorded = transcripts;
  }
  const sao::tokenizer::ByteTokenizer tokenizer;
  int64_t max_turns = 0;
  int64_t successes = 0;
  for (const auto& message : received) {
    const auto& t = message;
    CHECK_NOTHROW(t.validate("trajectory"));
    const auto parts = split(t);
    max_turns = std::max(max_turns, message.origin.turns);
    CHECK(static_cast<int64_t>(parts.actions.size()) == message.origin.turns);
    CHECK(message.origin.turns >= 3);  // the shortest maze path is 3 moves
    // Every action token has a version and a log-prob; nothing else does.
    for (size_t i = 0; i < t.size(); ++i) {
      if (t.action_mask[i] == 1) {
        CHECK(t.policy_versions[i] >= 0);
      } else {
        CHECK(t.policy_versions[i] == -1);
        CHECK(t.rewards[i] == 0.0f);
      }
    }
    // Find the environment's side of this episode: same prompt, same actions.
    REQUIRE(!parts.prompt.empty());
    CHECK(parts.prompt.front() == tokenizer.bos_id());
    const std::string prompt = tokenizer.decode({parts.prompt.begin() + 1, parts.prompt.end()}, true);
    std::vector<std::string> actions;
    for (const auto& action : parts.actions) {
      std::vector<int64_t> answer(action);
      answer.erase(std::find(answer.begin(), answer.end(), tokenizer.eos_id()), answer.end());
      actions.push_back(tokenizer.decode(answer, true));
    }
    // The observations the policy saw after each turn (the masked runs) are
    // the environment's texts, byte for byte: some recorded episode has this
    // prompt, these actions and exactly these observations.
    const auto same_observations = [&](const Transcript& transcript) {
      for (size_t turn = 0; turn < parts.observations.size(); ++turn) {
        if (parts.observations[turn] != tokenizer.encode(transcript.observations[turn])) return false;
      }
      return true;
    };
    const Transcript* match = nullptr;
    for (const auto& transcript : recorded) {
      if (transcript.prompt == prompt && transcript.actions == actions && same_observations(transcript)) {
        match = &transcript;
      }
    }
    REQUIRE_MESSAGE(match != nullptr, "no environment transcript for prompt " << prompt);
    for (size_t turn = 0; turn < parts.actions.size(); ++turn) {
      // The turn's reward is on its last action token and nowhere else in the turn.
      const size_t end = parts.action_ends[turn];
      CHECK(t.rewards[end] == doctest::Approx(match->rewards[turn]));
      for (size_t i = end + 1 - parts.actions[turn].size(); i < end; ++i) CHECK(t.rewards[i] == 0.0f);
    }
    // The last action token carries the final reward: 1 exactly when the maze was solved.
    const double final_reward = t.rewards[parts.action_ends.back()];
    CHECK(final_reward == doctest::Approx(match->rewards.back()));
    CHECK(final_reward == doctest::Approx(t.accuracy));
    successes += final_reward > 0.5 ? 1 : 0;
  }
  MESSAGE(received.size() << " trajectories, longest " << max_turns << " turns, " << successes << " solved");
  CHECK(max_turns >= 3);
  CHECK(successes > 0);  // the warm start solves about half: final rewards of 1 were checked too
}

TEST_CASE("SAO through the actors on the maze finishes on budget and logs every step") {
  const auto dir = fresh_dir("maze");
  const auto config = maze_config(dir.string(), {"train.steps=10"});
  const auto outcome = sao::actors::run_training(config, clone(warm_maze_policy(), config.model), "", nullptr);
  CHECK(outcome.reason == "budget");
  CHECK(outcome.steps == 10);
  CHECK(outcome.actors_left_running == 0);
  const auto steps = step_lines(dir);
  REQUIRE(steps.size() == 10);
  int64_t max_tokens_per_episode = 0;
  for (const auto& line : steps) {
    CHECK(line["trajectories"].get<int64_t>() >= 1);
    CHECK(line["reward_mean"].is_number());
    max_tokens_per_episode =
        std::max(max_tokens_per_episode, line["tokens"].get<int64_t>() / line["trajectories"].get<int64_t>());
  }
  // A one-turn episode would be ~11 tokens (BOS, 8-byte prompt, action, EOS).
  CHECK(max_tokens_per_episode > 20);
  const auto summary = nlohmann::json::parse(outcome.summary_json);
  MESSAGE("summary: " << summary.dump());
  fs::remove_all(dir);
}

TEST_CASE("an external environment process (guess_number.py) through the actors finishes on budget") {
  const auto dir = fresh_dir("external");
  auto overrides = tiny_model_overrides(dir.string());
  overrides.push_back("env.name=\"external\"");
  overrides.push_back("task={\"name\":\"external\",\"command\":[\"python3\",\"" + kGuessNumber +
                      "\"],\"timeout_ms\":10000,\"max_turns\":6}");
  overrides.push_back("rollout.max_turns=6");
  overrides.push_back("rollout.slots=4");
  overrides.push_back("rollout.env_timeout_ms=10000");
  overrides.push_back("train.steps=4");
  const auto config = sao::config::load_run_config("", overrides);
  sao::model::CausalLM policy(config.model);  // no warm start: the run only has to work, not to win
  sao::model::init_weights(*policy, 1);
  const auto outcome = sao::actors::run_training(config, policy, "", nullptr);
  CHECK(outcome.reason == "budget");
  CHECK(outcome.steps == 4);
  CHECK(outcome.actors_left_running == 0);
  CHECK(step_lines(dir).size() == 4);
  const auto summary = nlohmann::json::parse(outcome.summary_json);
  MESSAGE("summary: " << summary.dump());
  CHECK(summary["episodes_lost"].get<int64_t>() == 0);
  fs::remove_all(dir);
}

TEST_CASE("OpenEnv servers through the actors: WebSocket sessions spread over two servers, on budget") {
  const auto dir = fresh_dir("openenv");
  std::vector<std::unique_ptr<sao_test::OpenEnvServer>> servers;
  nlohmann::json urls = nlohmann::json::array();
  for (int i = 0; i < 2; ++i) {  // four sessions at once (rollout.slots), spread over both
    servers.push_back(std::make_unique<sao_test::OpenEnvServer>());
    urls.push_back(servers.back()->url());
  }
  auto overrides = tiny_model_overrides(dir.string());
  overrides.push_back("env.name=\"openenv\"");
  overrides.push_back("task={\"name\":\"openenv\",\"urls\":" + urls.dump() +
                      ",\"action_key\":\"guess\",\"observation_key\":\"text\",\"success_key\":\"won\","
                      "\"max_turns\":6}");
  overrides.push_back("rollout.max_turns=6");
  overrides.push_back("rollout.slots=4");
  overrides.push_back("rollout.env_timeout_ms=60000");
  overrides.push_back("train.steps=4");
  const auto config = sao::config::load_run_config("", overrides);
  sao::model::CausalLM policy(config.model);  // no warm start: the run only has to work, not to win
  sao::model::init_weights(*policy, 1);
  const auto outcome = sao::actors::run_training(config, policy, "", nullptr);
  CHECK(outcome.reason == "budget");
  CHECK(outcome.steps == 4);
  CHECK(outcome.actors_left_running == 0);
  CHECK(step_lines(dir).size() == 4);
  const auto summary = nlohmann::json::parse(outcome.summary_json);
  MESSAGE("summary: " << summary.dump());
  CHECK(summary["episodes_lost"].get<int64_t>() == 0);
  fs::remove_all(dir);
}

TEST_CASE("a drifting environment's regime switches show in metrics.jsonl at the configured steps") {
  const auto dir = fresh_dir("drift");
  auto overrides = tiny_model_overrides(dir.string());
  overrides.push_back("env.name=\"drift\"");
  overrides.push_back(
      "task={\"name\":\"drift\",\"min_digits\":1,\"max_digits\":1,\"operators\":\"+\",\"test_fraction\":0.2,"
      "\"test_size\":20,\"switch_every\":4,\"regimes\":[\"plain\",\"reversed\"]}");
  overrides.push_back("rollout.max_turns=1");
  overrides.push_back("rollout.slots=8");
  overrides.push_back("replay.max_batch=8");
  overrides.push_back("replay.capacity=8");
  overrides.push_back("train.steps=12");
  const auto config = sao::config::load_run_config("", overrides);
  sao::model::CausalLM policy(config.model);  // the regime, not the reward, is under test
  sao::model::init_weights(*policy, 1);
  const auto outcome = sao::actors::run_training(config, policy, "", nullptr);
  CHECK(outcome.reason == "budget");
  CHECK(outcome.actors_left_running == 0);
  const auto steps = step_lines(dir);
  REQUIRE(steps.size() == 12);
  std::set<double> regimes;
  for (const auto& line : steps) {
    REQUIRE(line.contains("env_regime"));
    regimes.insert(line["env_regime"].get<double>());
  }
  // Learner steps 0-3 are regime 0, 4-7 regime 1, 8-11 regime 0 again; the
  // env actors hear of each step after it, so both regimes must appear.
  CHECK(regimes == std::set<double>{0.0, 1.0});
  CHECK(steps.front()["env_regime"] == 0.0);
  fs::remove_all(dir);
}

// A compliant but slow environment: each reset takes 100 ms, well inside
// the 350 ms env timeout. A batch of 8 resets waits in the env actor's
// queue behind one another (800 ms in all); only the serving time of each
// counts against the timeout, so none is lost.
class SlowResetMaze final : public sao::env::Environment {
 public:
  SlowResetMaze(const nlohmann::json& config, const std::string& where)
      : inner_(sao::env::make_environment("maze", config, where)) {}
  sao::env::EnvStep reset(uint64_t seed) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return inner_->reset(seed);
  }
  sao::env::EnvStep step(const std::string& action) override { return inner_->step(action); }
  std::string name() const override { return "slow_reset_maze"; }
  int64_t heldout_size() const override { return inner_->heldout_size(); }
  sao::env::EnvStep reset_heldout(int64_t index) override { return inner_->reset_heldout(index); }
  sao::env::EnvLimits limits() const override { return inner_->limits(); }

 private:
  std::unique_ptr<sao::env::Environment> inner_;
};

TEST_CASE("a slow but compliant environment loses no episode to queueing in its env actor") {
  sao::env::register_environment("slow_reset_maze", [](const nlohmann::json& config, const std::string& where) {
    return std::make_unique<SlowResetMaze>(config, where);
  });
  const auto dir = fresh_dir("slow_env");
  const auto config =
      maze_config(dir.string(), {"env.name=\"slow_reset_maze\"", "train.steps=3", "rollout.slots=8",
                                 "rollout.env_timeout_ms=350", "task={\"name\":\"maze\",\"heldout_size\":4}"});
  const auto outcome = sao::actors::run_training(config, clone(warm_maze_policy(), config.model), "", nullptr);
  CHECK(outcome.reason == "budget");
  const auto summary = nlohmann::json::parse(outcome.summary_json);
  MESSAGE("summary: " << summary.dump());
  CHECK(summary["episodes_lost"] == 0);
  CHECK(summary["env_restarts"] == 0);
  fs::remove_all(dir);
}
