// `sao train` against environments that fail. One that refuses some held-out
// episodes: every evaluation line, the summary and the final line carry the
// error count, and the accuracy is over the answered episodes. One that is
// dead (an external process that never answers, an OpenEnv server that has
// gone away): the run stops after train.max_env_failures_in_a_row failed
// calls (counted as requests the environment received, not as seconds),
// through its normal end: exit status 1, the message naming the environment
// and the cause, a final checkpoint, a summary, and no actor left running
// (exit status 4).
#include "test_openenv_server.hpp"
#include "test_tiny_run.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

namespace fs = std::filesystem;

namespace {

// Appends every request it receives to argv[1] and never answers one.
const char* kSilentEnv = R"PY(
import sys
with open(sys.argv[1], "a") as log:
    for line in sys.stdin:
        log.write(line)
        log.flush()
)PY";

int64_t count_lines(const fs::path& path) {
  std::ifstream in(path);
  int64_t count = 0;
  std::string line;
  while (std::getline(in, line)) ++count;
  return count;
}

nlohmann::json summary_of(const fs::path& run_dir) {
  std::ifstream in(run_dir / "summary.json");
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("held-out episodes the environment refuses are counted on every evaluation line, the summary and the end") {
  sao_test::RunFixture fixture("refusing_env");
  // Held-out episodes 1 and 4 are refused with an error reply.
  const nlohmann::json task = {
      {"name", "external"},
      {"command", {"python3", std::string(SAO_SOURCE_DIR) + "/tests/envs/plus_one.py", "--refuse", "1,4"}},
      {"heldout_size", 6},
      {"max_turns", 1}};
  const auto result =
      fixture.train("--steps 2 --set env.name=\\\"external\\\" --set " + sao_test::quoted("task=" + task.dump()));
  INFO(result.output);
  CHECK(result.exit_code == 0);
  const std::string warning =
      " -- WARNING: 2 of 6 held-out episodes lost to environment errors (not scored; the accuracy is over the 4 "
      "answered)";
  CHECK(result.output.find("eval step 0: held-out accuracy") != std::string::npos);
  CHECK(result.output.find("(6 problems)" + warning) != std::string::npos);  // each evaluation's stderr line
  CHECK(result.output.find(", 6 problems" + warning) != std::string::npos);  // the final summary
  const auto summary = summary_of(fixture.run_dir);
  CHECK(summary["heldout_errors_last"] == 2);
  REQUIRE(summary["evals"].size() == 2);
  for (const auto& eval : summary["evals"]) {
    CHECK(eval["errors"] == 2);
    CHECK(eval["total"] == 6);
    // Scored over the 4 answered episodes: a multiple of 1/4.
    const double quarters = eval["heldout_accuracy"].get<double>() * 4.0;
    CHECK(quarters == std::round(quarters));
  }
}

TEST_CASE("a silent external environment stops the run after 3 failed requests, not one per held-out problem") {
  sao_test::RunFixture fixture("silent_env");
  fs::create_directories(fixture.base);
  const auto script = fixture.base / "silent.py";
  const auto requests = fixture.base / "requests.jsonl";
  std::ofstream(script) << kSilentEnv;
  const nlohmann::json task = {{"name", "external"},
                               {"command", {"python3", script.string(), requests.string()}},
                               {"label", "silent.py"},
                               {"timeout_ms", 2000},
                               {"startup_timeout_ms", 2000},
                               {"heldout_size", 40},
                               {"max_turns", 1}};
  const auto result = fixture.train(
      "--steps 5 --set train.max_env_failures_in_a_row=3 --set env.name=\\\"external\\\" "
      "--set " +
      sao_test::quoted("task=" + task.dump()));
  INFO(result.output);
  CHECK(result.exit_code == 1);
  CHECK(result.output.find("giving up: held-out evaluation: environment 'external' is dead: 3 consecutive failures "
                           "(train.max_env_failures_in_a_row 3); the last: external env 'silent.py': reset (id 1): "
                           "no reply within 2000 ms") != std::string::npos);
  CHECK(result.output.find("actors still running") == std::string::npos);
  // 3 requests of the evaluation before step 0 (of its 40 problems), and at
  // most 3 more from the env actor, which then answers "env dead" itself.
  const int64_t received = count_lines(requests);
  CHECK(received >= 1);
  CHECK(received <= 6);
  CHECK(fs::exists(fixture.run_dir / "checkpoint" / "MANIFEST.json"));
  const auto summary = summary_of(fixture.run_dir);
  CHECK(summary["steps"] == 0);
  REQUIRE(summary["evals"].size() == 1);
  CHECK(summary["evals"][0]["heldout_accuracy"].is_null());
  CHECK(summary["evals"][0]["env_dead"].get<std::string>().rfind("environment 'external' is dead: 3 consecutive", 0) ==
        0);
}

TEST_CASE("an OpenEnv server that has gone away stops the run after 3 failed resets, with exit status 1") {
  sao_test::RunFixture fixture("dead_openenv");
  sao_test::OpenEnvServer server;
  const std::string url = server.url();
  server.stop();  // the server dies before the run needs it
  const nlohmann::json task = {
      {"name", "openenv"},        {"url", url},         {"action_key", "guess"}, {"observation_key", "text"},
      {"success_key", "won"},     {"heldout_size", 40}, {"max_turns", 8},        {"timeout_ms", 500},
      {"startup_timeout_ms", 500}};
  const auto result = fixture.train(
      "--steps 5 --set train.max_env_failures_in_a_row=3 --set env.name=\\\"openenv\\\" "
      "--set " +
      sao_test::quoted("task=" + task.dump()));
  INFO(result.output);
  CHECK(result.exit_code == 1);
  CHECK(result.output.find("giving up: held-out evaluation: environment 'openenv' is dead: 3 consecutive failures "
                           "(train.max_env_failures_in_a_row 3); the last: openenv server " +
                           url + ": GET /health: not healthy within startup_timeout_ms = 500") != std::string::npos);
  CHECK(result.output.find("actors still running") == std::string::npos);
  CHECK(fs::exists(fixture.run_dir / "checkpoint" / "MANIFEST.json"));
  const auto summary = summary_of(fixture.run_dir);
  CHECK(summary["steps"] == 0);
  // Episodes the rollouts lost before the run ended: at most the env actor's 3
  // failures and the 4 episodes a rollout had begun.
  CHECK(summary["episodes_lost"].get<int64_t>() <= 4);
}
