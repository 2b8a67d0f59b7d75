// External environments over the line-JSON protocol. Why every malformed
// reply has its own case: an external environment is code the runtime does
// not control, and each way it can misbehave must become one clear, counted
// error (a lost episode) instead of a hang, a crash or a silent wrong reward.
// The bad environments are tiny Python scripts written into a temp dir.
#include "base/error.hpp"
#include "env/remote/external_env.hpp"
#include "model/transformer.hpp"
#include "test_tiny_model.hpp"
#include "tokenizer/byte_tokenizer.hpp"
#include "train/episode_eval.hpp"

#include <doctest/doctest.h>

#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using sao::env::ExternalConfig;
using sao::env::ExternalEnvironment;

namespace {

const std::string kGuessNumber = std::string(SAO_SOURCE_DIR) + "/deploy/envs/guess_number.py";

const char* kBadEnv = R"PY(
import json, os, sys, time
mode, marker = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "")
for line in sys.stdin:
    req = json.loads(line)
    i, method = req["id"], req["method"]
    if method == "close":
        break
    ok = {"id": i, "observation": "o", "reward": 0.0, "terminated": False, "truncated": False, "info": {}}
    if method == "reset":
        if mode == "notjson":
            print("hello world", flush=True); continue
        if mode == "notobject":
            print("[1, 2]", flush=True); continue
        if mode == "missing": del ok["reward"]
        if mode == "wrongtype": ok["reward"] = "1"
        if mode == "wrongid": ok["id"] = i + 1
        if mode == "noid": del ok["id"]
        if mode == "badinfo": ok["info"] = [1]
        if mode == "exits":
            sys.stderr.write("fatal: cannot load level 3\n"); sys.stderr.flush(); sys.exit(3)
        if mode == "error":
            print(json.dumps({"id": i, "error": "boom"}), flush=True); continue
    if method == "step":
        if mode == "crash_once" and not os.path.exists(marker):
            open(marker, "w").close(); os._exit(1)
        if mode == "slow_step":
            time.sleep(3600)
        ok["terminated"] = True
        ok["reward"] = 1.0
    print(json.dumps(ok), flush=True)
)PY";

// tests/envs/plus_one.py: deterministic; --pids FILE appends its pid when it
// starts, so the test counts process starts as lines, not by timing.
const std::string kPlusOne = std::string(SAO_SOURCE_DIR) + "/tests/envs/plus_one.py";

fs::path temp_dir() {
  static const fs::path dir = [] {
    auto path = fs::temp_directory_path() / ("sao_test_env_external_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
    std::ofstream(path / "bad_env.py") << kBadEnv;
    return path;
  }();
  return dir;
}

ExternalConfig bad_env(const std::string& mode, int64_t timeout_ms = 5000) {
  ExternalConfig config;
  config.channel.command = {"python3", (temp_dir() / "bad_env.py").string(), mode,
                            (temp_dir() / ("marker_" + mode)).string()};
  config.label = "bad_env.py";
  config.channel.timeout_ms = timeout_ms;
  return config;
}

std::string reset_error(const std::string& mode) {
  ExternalEnvironment env(bad_env(mode));
  try {
    env.reset(1);
  } catch (const sao::Error& error) {
    return error.what();
  }
  return "(no error)";
}

// Plays guess-the-number by binary search; returns the final reward.
double play_binary_search(sao::env::Environment& env, sao::env::EnvStep step) {
  const auto dash = step.observation.find('-');
  int64_t lo = std::stoll(step.observation.substr(0, dash));
  int64_t hi = std::stoll(step.observation.substr(dash + 1));
  while (!step.done()) {
    const int64_t guess = (lo + hi) / 2;
    step = env.step(std::to_string(guess));
    if (step.observation == "higher") lo = guess + 1;
    if (step.observation == "lower") hi = guess - 1;
  }
  CHECK(step.info["success"].get<int>() == 1);
  return step.reward;
}

}  // namespace

TEST_CASE("external: the python example plays end to end over stdin/stdout") {
  auto env = sao::env::make_environment(
      "external", {{"command", {"python3", kGuessNumber}}, {"heldout_size", 50}, {"timeout_ms", 10000}}, "cfg.task");
  auto& external = dynamic_cast<ExternalEnvironment&>(*env);
  CHECK(external.label() == "guess_number.py");
  CHECK_FALSE(external.connected());  // started lazily by the first reset
  for (uint64_t seed = 0; seed < 5; ++seed) CHECK(play_binary_search(*env, env->reset(seed)) == 1.0);
  CHECK(play_binary_search(*env, env->reset_heldout(3)) == 1.0);
  // A wrong guess gets a hint; an unparsable one too.
  auto step = env->reset(0);
  CHECK_FALSE(env->step("0").done());
  const auto hint = env->step("seven");
  CHECK(hint.observation == "number?");
  CHECK(external.restarts() == 0);
  CHECK(external.timeouts() == 0);
  CHECK(external.calls() > 10);
  CHECK(external.pid() > 0);
}

TEST_CASE("external: the python example over TCP") {
  FILE* server = ::popen(("python3 " + kGuessNumber + " --listen 127.0.0.1:0 --once").c_str(), "r");
  REQUIRE(server != nullptr);
  char line[256] = {0};
  REQUIRE(std::fgets(line, sizeof(line), server) != nullptr);
  std::string announced(line);
  REQUIRE(announced.rfind("listening ", 0) == 0);
  const std::string address = announced.substr(10, announced.find('\n') - 10);
  {
    auto env = sao::env::make_environment("external", {{"address", address}}, "cfg.task");
    CHECK(play_binary_search(*env, env->reset(42)) == 1.0);
    CHECK(play_binary_search(*env, env->reset(43)) == 1.0);
  }  // closing the connection ends the --once server
  CHECK(::pclose(server) == 0);
  ExternalConfig nobody;
  nobody.channel.address = address;  // nothing listens there any more
  ExternalEnvironment refused(nobody);
  CHECK_THROWS_WITH_AS(refused.reset(1), doctest::Contains("cannot connect"), sao::Error);
}

TEST_CASE("external: each malformed reply is a clear error naming the env, the call and the problem") {
  const auto check = [](const std::string& mode, const std::string& problem) {
    CAPTURE(mode);
    const auto message = reset_error(mode);
    CAPTURE(message);
    CHECK(message.find("external env 'bad_env.py'") != std::string::npos);
    CHECK(message.find("reset (id 1)") != std::string::npos);
    CHECK(message.find(problem) != std::string::npos);
  };
  check("notjson", "reply is not JSON: 'hello world'");
  check("notobject", "not a JSON object");
  check("missing", "reply has no \"reward\"");
  check("wrongtype", "\"reward\" must be a number, got string");
  check("wrongid", "reply has id 2, expected 1");
  check("noid", "reply has no \"id\"");
  check("badinfo", "\"info\" must be an object");
  check("exits", "the process exited with status 3");
  check("exits", "fatal: cannot load level 3");  // the stderr tail is quoted
  check("error", "the environment reported an error: boom");

  ExternalConfig missing;
  missing.channel.command = {"/no/such/program"};
  ExternalEnvironment env(missing);
  CHECK_THROWS_WITH_AS(env.reset(1), doctest::Contains("cannot run '/no/such/program'"), sao::Error);
  CHECK_THROWS_WITH_AS(sao::env::make_environment("external", {{"command", {"x"}}, {"address", "h:1"}}, "cfg.task"),
                       doctest::Contains("exactly one of command"), sao::Error);
  CHECK_THROWS_WITH_AS(sao::env::make_environment("external", {{"address", "nohost"}}, "cfg.task"),
                       doctest::Contains("cfg.task.address"), sao::Error);
  CHECK_THROWS_WITH_AS(sao::env::make_environment("external", {{"comand", {"x"}}}, "cfg.task"),
                       doctest::Contains("comand"), sao::Error);
}

TEST_CASE("external: an error reply ends the episode but keeps the process") {
  ExternalEnvironment env(bad_env("error"));
  CHECK_THROWS_AS(env.reset(1), sao::Error);
  CHECK(env.connected());
  CHECK_THROWS_WITH_AS(env.step("x"), doctest::Contains("after the episode ended"), sao::Error);
  CHECK_THROWS_AS(env.reset(2), sao::Error);
  CHECK(env.restarts() == 0);
}

TEST_CASE("external: a crashing process is restarted at the next reset and the restart is counted") {
  ExternalEnvironment env(bad_env("crash_once"));
  env.reset(1);
  const auto first_pid = env.pid();
  CHECK_THROWS_WITH_AS(env.step("a"), doctest::Contains("step (id 2): no reply: the process exited with status 1"),
                       sao::Error);
  CHECK_THROWS_AS(env.step("a"), sao::Error);  // the episode is lost
  env.reset(1);
  CHECK(env.restarts() == 1);
  CHECK(env.pid() != first_pid);
  const auto step = env.step("a");  // the marker exists now: no second crash
  CHECK(step.terminated);
  CHECK(step.reward == 1.0);
  CHECK(env.stats()["errors"] == 1);
}

TEST_CASE("external: a call timeout is reported, counted, and the process restarted") {
  // The step sleeps for an hour: the test finishes only because the sleeping
  // process is killed at the deadline, never waited for. The reset after the
  // restart is the process's first call, so it has startup_timeout_ms (30 s)
  // however slowly python3 starts on a loaded machine.
  ExternalEnvironment env(bad_env("slow_step", 1000));
  env.reset(1);
  CHECK_THROWS_WITH_AS(env.step("a"), doctest::Contains("step (id 2): no reply within 1000 ms (timeouts: 1)"),
                       sao::Error);
  CHECK(env.timeouts() == 1);
  CHECK_FALSE(env.connected());
  CHECK(env.reset(2).observation == "o");
  CHECK(env.restarts() == 1);
}

namespace {
int64_t lines_in(const fs::path& path) {
  std::ifstream in(path);
  int64_t count = 0;
  std::string line;
  while (std::getline(in, line)) ++count;
  return count;
}

// Two held-out evaluations of 10 episodes, 3 at a time, of plus_one.py; the
// environments of the second are the first's when `pool` is given.
std::pair<sao::train::EpisodeEvalResult, int64_t> evaluate_twice(bool process_per_episode, bool pooled,
                                                                 const std::string& name) {
  const auto log = temp_dir() / (name + ".pids");
  fs::remove(log);
  ExternalConfig config;
  config.channel.command = {"python3", kPlusOne, "--pids", log.string()};
  config.label = "plus_one.py";
  config.heldout_size = 10;
  config.max_turns = 1;
  config.process_per_episode = process_per_episode;
  torch::manual_seed(5);
  sao::model::CausalLM policy(sao_test::tiny_byte_model());
  const sao::tokenizer::ByteTokenizer tokenizer;
  sao::train::EpisodeEvalOptions options;
  options.max_new_tokens = 3;
  options.batch_size = 3;
  options.sample_transcripts = 10;
  sao::train::EnvironmentPool pool;
  const auto maker = [&] { return std::make_unique<ExternalEnvironment>(config); };
  sao::train::evaluate_episodes(policy, tokenizer, maker, options, 1, pooled ? &pool : nullptr);
  auto second = sao::train::evaluate_episodes(policy, tokenizer, maker, options, 1, pooled ? &pool : nullptr);
  pool.environments.clear();  // every process has written its pid before this
  return {second, lines_in(log)};
}
}  // namespace

TEST_CASE("external: evaluations through a pool of P processes start P, with the per-episode route's results") {
  const auto [pooled, pooled_starts] = evaluate_twice(false, true, "pooled");
  const auto [per_episode, per_episode_starts] = evaluate_twice(true, true, "per_episode");
  CHECK(pooled_starts == 3);        // 20 episodes, 3 at a time, through the same 3 processes
  CHECK(per_episode_starts == 20);  // process_per_episode: one process for every episode
  CHECK(pooled.errors == 0);
  CHECK(per_episode.errors == 0);
  CHECK(pooled.solved == per_episode.solved);
  CHECK(pooled.samples == per_episode.samples);
  CHECK(pooled.mean_reward == per_episode.mean_reward);
  REQUIRE(pooled.samples.size() == 10);
  CHECK(pooled.samples[9].rfind("9+1=", 0) == 0);
  // Without a pool each evaluation starts its own.
  CHECK(evaluate_twice(false, false, "unpooled").second == 6);
}
