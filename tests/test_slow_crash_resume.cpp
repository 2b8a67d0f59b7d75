// kill -9 of `sao train` at five points, then --resume to the budget. Three
// points are inside a checkpoint swap, where no outside timing could hit
// them reliably, so the process kills itself there (SAO_FAILPOINT,
// base/failpoint.hpp); two are kill -9 from outside once the run has written
// a given number of steps. After each, the resumed run must reach its
// budget with every learner step in metrics.jsonl exactly once (what came
// after the checkpoint moved aside), continue from the checkpoint's step,
// and never take the policy version back.
#include "test_tiny_run.hpp"

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <regex>
#include <thread>
#include <vector>

namespace {

using sao_test::lines_of;
using sao_test::one_to;
using sao_test::RunFixture;
using sao_test::step_numbers;

constexpr int64_t kBudget = 8;
const std::string kRun = "--steps 8 --set train.checkpoint_every=2";

// The step `sao train --resume` said it continues from.
int64_t resumed_step(const std::string& output) {
  std::smatch match;
  static const std::regex pattern(R"(resuming from \S+ \(step (\d+)\))");
  REQUIRE(std::regex_search(output, match, pattern));
  return std::stoll(match[1]);
}

// The "recovered" event the latest resume wrote into metrics.jsonl.
nlohmann::json last_recovery(const sao_test::fs::path& run_dir) {
  nlohmann::json found;
  for (const auto& line : lines_of(run_dir / "metrics.jsonl")) {
    if (line.value("event", "") == "recovered") found = line;
  }
  REQUIRE_MESSAGE(!found.is_null(), "the resume wrote no recovered event");
  return found;
}

// The sum of "trajectories" over the step lines of a moved-aside file (a
// line torn by the kill holds none).
int64_t trajectories_in(const sao_test::fs::path& path) {
  int64_t total = 0;
  std::ifstream in(path);
  for (std::string text; std::getline(in, text);) {
    const auto line = nlohmann::json::parse(text, nullptr, false);
    if (line.is_object() && !line.contains("eval") && !line.contains("event") && line.contains("trajectories"))
      total += static_cast<int64_t>(line["trajectories"].get<double>());
  }
  return total;
}

// `expected_from`: the checkpoint steps the resume may continue from (a
// kill from outside can land just before or just after a checkpoint).
void check_continuity(const RunFixture& fixture, const sao_test::CommandResult& resumed,
                      const std::vector<int64_t>& expected_from) {
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  const auto from = resumed_step(resumed.output);
  CHECK(std::find(expected_from.begin(), expected_from.end(), from) != expected_from.end());
  CHECK(step_numbers(fixture.run_dir) == one_to(kBudget));
  int64_t last_version = -1;
  for (const auto& line : lines_of(fixture.run_dir / "metrics.jsonl")) {
    if (line.contains("eval") || line.contains("event")) continue;
    CHECK(line["policy_version"].get<int64_t>() >= last_version);  // never goes back (critic warm-up holds it)
    last_version = line["policy_version"].get<int64_t>();
  }
  std::ifstream in(fixture.run_dir / "summary.json");
  const auto summary = nlohmann::json::parse(in);
  CHECK(summary["steps"] == kBudget);
  // What the checkpoint did not hold is counted lost, once: the trajectories
  // trained after it (the step lines moved aside), those left in replay,
  // those lost after it, and one batch in flight for the one rollout actor
  // (slots 4).
  const auto event = last_recovery(fixture.run_dir);
  CHECK(event["step"] == from);
  CHECK(event["in_flight"] == 4);
  CHECK(event["trained_after_checkpoint"] ==
        trajectories_in(fixture.run_dir / ("metrics.after-step-" + std::to_string(from) + ".jsonl")));
  const int64_t lost = event["episodes_lost_at_stop"];
  CHECK(lost == event["trained_after_checkpoint"].get<int64_t>() + event["queued_at_last_step"].get<int64_t>() +
                    event["lost_after_checkpoint"].get<int64_t>() + 4);
  CHECK(summary["episodes_lost"].get<int64_t>() >= lost);
}

// Starts `sao train ARGS` in the background; kill -9 once metrics.jsonl
// holds `steps` step lines; returns after the process is gone.
void kill_after_steps(const RunFixture& fixture, size_t steps, const std::string& args) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::setpgid(0, 0);  // the shell and `sao train` join this group: one kill reaches all
    const auto result = fixture.train(args + " > /dev/null 2>&1");
    ::_exit(result.exit_code);
  }
  while (step_numbers(fixture.run_dir).size() < steps) {
    int status = 0;
    REQUIRE_MESSAGE(::waitpid(pid, &status, WNOHANG) == 0, "the run ended before it was killed");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(-pid, SIGKILL);
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

}  // namespace

TEST_CASE("kill -9 inside a checkpoint swap, at each of its three steps, then --resume") {
  struct Point {
    const char* failpoint;
    // The checkpoint of step 4 is the one interrupted (the first save, at step
    // 2, has no previous copy to move, so swap.previous is first passed at 4).
    int64_t resumes_from;
  };
  for (const Point point : {Point{"swap.staged:checkpoint@2", 2}, Point{"swap.complete:checkpoint@2", 4},
                            Point{"swap.previous:checkpoint@1", 4}}) {
    CAPTURE(point.failpoint);
    RunFixture fixture(std::string("crash_") + std::to_string(point.resumes_from) + point.failpoint[5]);
    const auto killed = fixture.train(kRun, std::string("SAO_FAILPOINT=") + point.failpoint + " ");
    INFO(killed.output);
    REQUIRE(killed.exit_code != 0);  // it died at the failpoint, before its budget
    CHECK(step_numbers(fixture.run_dir).size() < static_cast<size_t>(kBudget));
    check_continuity(fixture, fixture.train(kRun + " --resume"), {point.resumes_from});
  }
}

TEST_CASE("kill -9 from outside, twice in one run, then --resume") {
  // A longer run, so that a kill seen after N steps lands well before the
  // end however fast the machine is (a tiny step takes milliseconds).
  const std::string run = "--steps 300 --set train.checkpoint_every=10";
  RunFixture fixture("crash_outside");
  kill_after_steps(fixture, 15, run);
  const auto killed_at = step_numbers(fixture.run_dir).size();
  kill_after_steps(fixture, killed_at + 20, run + " --resume");
  const auto resumed = fixture.train(run + " --resume");
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  const auto from = resumed_step(resumed.output);
  CHECK(from % 10 == 0);  // a checkpoint step
  CHECK(from > static_cast<int64_t>(killed_at) - 10);
  CHECK(from < 300);  // the second kill came before the end
  CHECK(step_numbers(fixture.run_dir) == one_to(300));
  std::ifstream in(fixture.run_dir / "summary.json");
  const auto summary = nlohmann::json::parse(in);
  CHECK(summary["steps"] == 300);
  const auto event = last_recovery(fixture.run_dir);
  CHECK(event["step"] == from);
  CHECK(event["episodes_lost_at_stop"].get<int64_t>() >= 4);  // at least the batch in flight
  CHECK(summary["episodes_lost"].get<int64_t>() >= event["episodes_lost_at_stop"].get<int64_t>());
}
