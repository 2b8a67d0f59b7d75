// The sao binary under failures it must survive or end cleanly: a model
// section that disagrees with the warm start, an environment program that
// does not exist, an environment that loses every episode, and the resume
// edges (a finished run, a kill between the renames of a checkpoint swap, a
// corrupted checkpoint). Each run is a tiny model for a few steps; nothing
// here waits on the clock.
#include "test_tiny_run.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

using sao_test::lines_of;
using sao_test::one_to;
using sao_test::quoted;
using sao_test::RunFixture;
using sao_test::step_numbers;
using Result = sao_test::CommandResult;

Result run(const std::string& command) {
  return sao_test::run_command(command);
}

}  // namespace

TEST_CASE("a model section that disagrees with the warm start is an error at start, naming the key") {
  RunFixture fixture("shape");
  const auto result = fixture.train("--steps 1 --set model.hidden_size=64 --set model.intermediate_size=128");
  INFO(result.output);
  CHECK(result.exit_code != 0);
  CHECK(result.output.find("model.hidden_size is 64 in the run config") != std::string::npos);
  CHECK(result.output.find("but 32 in the warm start") != std::string::npos);
  CHECK(result.output.find("restarting rollout") == std::string::npos);
}

TEST_CASE("an environment program that does not exist is an error at start") {
  RunFixture fixture("missing_command");
  const auto result = fixture.train(
      "--steps 1 --set env.name=\\\"external\\\" --set 'task={\"command\": [\"sao-no-such-program-xyz\"]}'");
  INFO(result.output);
  CHECK(result.exit_code != 0);
  CHECK(result.output.find("program 'sao-no-such-program-xyz' not found on PATH") != std::string::npos);
  CHECK_FALSE(fs::exists(fixture.run_dir / "metrics.jsonl"));
}

TEST_CASE("an environment that loses every episode ends the run with the first loss, not a loop") {
  RunFixture fixture("losing_env");
  const auto result = fixture.train(
      "--steps 5 --set train.max_lost_in_a_row=6 --set train.max_env_failures_in_a_row=0 "
      "--set env.name=\\\"external\\\" "
      "--set 'task={\"command\": [\"python3\", \"-c\", \"import sys; sys.exit(3)\"]}'");
  INFO(result.output);
  CHECK(result.exit_code == 1);
  CHECK(result.output.find("gave up: 6 episodes lost in a row with no learner step") != std::string::npos);
  CHECK(result.output.find("the first: rollout-0") != std::string::npos);
  // The run still ends through its normal end: a summary and a checkpoint.
  CHECK(fs::exists(fixture.run_dir / "summary.json"));
  CHECK(fs::exists(fixture.run_dir / "checkpoint" / "MANIFEST.json"));
}

TEST_CASE("resume: a finished run trains no step past its budget, and the counters continue") {
  RunFixture fixture("finished");
  auto first = fixture.train("--steps 2");
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  CHECK(step_numbers(fixture.run_dir) == one_to(2));
  auto again = fixture.train("--steps 2 --resume");
  INFO(again.output);
  REQUIRE(again.exit_code == 0);
  CHECK(again.output.find("resuming from") != std::string::npos);
  CHECK(step_numbers(fixture.run_dir) == one_to(2));
  std::ifstream in(fixture.run_dir / "summary.json");
  const auto summary = nlohmann::json::parse(in);
  CHECK(summary["steps"] == 2);
  // The evaluations of the first run are still the run's evaluations.
  const auto first_eval = lines_of(fixture.run_dir / "metrics.jsonl").front();
  CHECK(first_eval.contains("eval"));
  CHECK(summary["heldout_accuracy_first"] == first_eval["heldout_accuracy"]);
  int evals_at_two = 0;
  for (const auto& line : lines_of(fixture.run_dir / "metrics.jsonl"))
    evals_at_two += line.contains("eval") && line["step"] == 2 ? 1 : 0;
  CHECK(evals_at_two == 1);
}

TEST_CASE("resume after a kill between the two renames of a checkpoint swap") {
  RunFixture fixture("swap");
  REQUIRE(fixture.train("--steps 2").exit_code == 0);
  const fs::path checkpoint = fixture.run_dir / "checkpoint";
  SUBCASE("killed after the new copy was complete, before it was renamed into place") {
    fs::rename(checkpoint, fixture.run_dir / "checkpoint.complete-123");
    auto resumed = fixture.train("--steps 3 --resume");
    INFO(resumed.output);
    REQUIRE(resumed.exit_code == 0);
    CHECK(resumed.output.find("finished the interrupted swap") != std::string::npos);
  }
  SUBCASE("killed with only the previous copy left under its other name") {
    fs::remove_all(fixture.run_dir / "checkpoint.previous");
    fs::rename(checkpoint, fixture.run_dir / "checkpoint.previous");
    auto resumed = fixture.train("--steps 3 --resume");
    INFO(resumed.output);
    REQUIRE(resumed.exit_code == 0);
    CHECK(resumed.output.find("restored") != std::string::npos);
  }
  CHECK(fs::exists(checkpoint / "MANIFEST.json"));
  CHECK(step_numbers(fixture.run_dir) == one_to(3));
}

TEST_CASE("resume: a corrupted checkpoint is refused by its checksum and the previous one is used") {
  RunFixture fixture("corrupt");
  REQUIRE(fixture.train("--steps 2 --set train.checkpoint_every=1").exit_code == 0);
  const fs::path weights = fixture.run_dir / "checkpoint" / "learner" / "policy.safetensors";
  {
    std::fstream file(weights, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(-5, std::ios::end);
    file.put('\x7f');
  }
  auto resumed = fixture.train("--steps 3 --resume --set train.checkpoint_every=1");
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  CHECK(resumed.output.find("does not match its checksum") != std::string::npos);
  CHECK(resumed.output.find("using the previous checkpoint") != std::string::npos);
  CHECK(resumed.output.find("(step 1)") != std::string::npos);
  // Step 2 of the first run was after the checkpoint used: moved out, trained again.
  CHECK(step_numbers(fixture.run_dir) == one_to(3));
  CHECK(fs::exists(fixture.run_dir / "metrics.after-step-1.jsonl"));
}

TEST_CASE("sao sft --steps -5 is refused with the key's range, like the config key") {
  const auto result = run(std::string(SAO_BINARY) + " sft --steps -5 --run-dir " +
                          quoted((fs::temp_directory_path() / "sao_test_sft_negative").string()));
  INFO(result.output);
  CHECK(result.exit_code != 0);
  CHECK(result.output.find("sft.steps: must be an integer in [0, 100000000], got -5") != std::string::npos);
  fs::remove_all(fs::temp_directory_path() / "sao_test_sft_negative");
}

TEST_CASE("a model too large for the machine stops sao sft at start with the estimate") {
  const auto dir = fs::temp_directory_path() / "sao_test_sft_huge";
  const auto result = run(std::string(SAO_BINARY) +
                          " sft --set model.hidden_size=16384 --set model.intermediate_size=65536"
                          " --set model.num_hidden_layers=256 --set model.num_attention_heads=128"
                          " --set model.num_key_value_heads=128 --run-dir " +
                          quoted(dir.string()));
  INFO(result.output);
  CHECK(result.exit_code != 0);
  CHECK(result.output.find("the run needs about") != std::string::npos);
  CHECK(result.output.find("of memory is available") != std::string::npos);
  fs::remove_all(dir);
}
