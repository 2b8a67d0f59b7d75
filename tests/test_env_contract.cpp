// The environment contract, checked over EVERY registered environment (a new
// built-in is covered the moment it is registered), plus the example
// environment that serves as the template. Why a generic test: the runtime
// treats all environments alike, so reproducible seeds, errors after the end,
// and a held-out split that never leaks into training must hold for each.
#include "base/error.hpp"
#include "base/hash.hpp"
#include "env/environment.hpp"
#include "env/tasks/example_env.hpp"
#include "test_openenv_server.hpp"

#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

using sao::env::Environment;
using sao::env::EnvStep;
using sao::env::make_environment;

namespace {

// Every built-in runs on an empty config except the external one, which needs
// a program (the shipped example), the dataset task, which needs data (the
// shipped two-turn example), and the OpenEnv one, which needs a server (the
// test tree's, started once for the whole test binary).
nlohmann::json config_for(const std::string& name) {
  if (name == "openenv") {
    static sao_test::OpenEnvServer server;
    return {{"url", server.url()}, {"heldout_size", 50}, {"timeout_ms", 10000}};
  }
  if (name == "dataset") {
    return {{"train", std::string(SAO_SOURCE_DIR) + "/examples/datasets/reverse.jsonl"}, {"heldout_fraction", 0.1}};
  }
  if (name == "external") {
    return {{"command", {"python3", std::string(SAO_SOURCE_DIR) + "/deploy/envs/guess_number.py"}},
            {"heldout_size", 50},
            {"timeout_ms", 10000}};
  }
  return nlohmann::json::object();
}

std::unique_ptr<Environment> make(const std::string& name) {
  return make_environment(name, config_for(name), "test");
}

std::string record(const EnvStep& step) {
  return step.observation + "|" + std::to_string(step.reward) + "|" + (step.terminated ? "T" : "-") +
         (step.truncated ? "T" : "-") + "|" + step.info.dump();
}

// Plays a fixed action script (cycled) until the episode ends. Returns the
// transcript; `done` reports whether it ended within `max_steps`.
std::vector<std::string> play(Environment& env, uint64_t seed, int max_steps, bool& done) {
  const std::vector<std::string> script = {"N", "17", "E", "abc", "S", "W", "3", "", "46", "N"};
  std::vector<std::string> transcript = {record(env.reset(seed))};
  done = false;
  for (int t = 0; t < max_steps && !done; ++t) {
    const auto step = env.step(script[static_cast<size_t>(t) % script.size()]);
    transcript.push_back(record(step));
    done = step.done();
  }
  return transcript;
}

std::string key_of(const EnvStep& reset) {
  if (reset.info.contains("episode_key") && reset.info["episode_key"].is_string()) {
    return reset.info["episode_key"].get<std::string>();
  }
  return "";
}

}  // namespace

TEST_CASE("the built-in environments are registered") {
  const auto names = sao::env::registered_environments();
  for (const char* expected :
       {"arithmetic", "example", "maze", "drift", "external", "dataset", "openenv", "calculator", "countdown"}) {
    CHECK(std::find(names.begin(), names.end(), expected) != names.end());
  }
  try {
    make_environment("no_such_env", {}, "config.env");
    FAIL("expected an error");
  } catch (const sao::Error& error) {
    const std::string message = error.what();
    CHECK(message.find("config.env") != std::string::npos);
    CHECK(message.find("maze") != std::string::npos);
  }
}

TEST_CASE("every registered environment keeps the contract") {
  for (const auto& name : sao::env::registered_environments()) {
    CAPTURE(name);
    auto first = make(name);
    auto second = make(name);
    const int max_steps = first->limits().max_turns > 0 ? static_cast<int>(first->limits().max_turns) : 64;

    // A fresh environment refuses step() before reset().
    CHECK_THROWS_AS(first->step("x"), sao::Error);

    // Seeded reset is reproducible across instances, and so is the episode.
    bool done_a = false, done_b = false;
    const auto a = play(*first, 12345, max_steps, done_a);
    const auto b = play(*second, 12345, max_steps, done_b);
    CHECK(a == b);
    CHECK(done_a);
    // Step after the episode ended is an error, not a reward.
    CHECK_THROWS_AS(first->step("x"), sao::Error);
    // The same object plays a new episode after reset, identically again.
    bool done_c = false;
    CHECK(play(*first, 12345, max_steps, done_c) == a);

    // Different seeds give different episodes.
    std::set<std::string> starts;
    for (uint64_t seed = 0; seed < 20; ++seed) {
      const auto reset = first->reset(seed);
      starts.insert(reset.observation + key_of(reset));
    }
    CHECK(starts.size() > 1);

    // Hooks every environment accepts.
    CHECK_NOTHROW(first->on_training_step(7));
    const auto limits = first->limits();
    CHECK(limits.max_turns >= 0);
    CHECK(limits.max_action_bytes >= 0);
    const auto demos = first->demonstrations(3, 99);
    const auto demos_again = first->demonstrations(3, 99);
    REQUIRE(demos.size() == demos_again.size());
    for (size_t i = 0; i < demos.size(); ++i) {
      CHECK(demos[i].prompt == demos_again[i].prompt);
      CHECK_FALSE(demos[i].turns.empty());
      CHECK(demos[i].turns.back().observation.empty());
    }

    // The held-out split: reproducible and disjoint from training.
    const int64_t heldout = first->heldout_size();
    if (heldout == 0) {
      CHECK_THROWS_AS(first->reset_heldout(0), sao::Error);
      continue;
    }
    CHECK_THROWS_AS(first->reset_heldout(heldout), sao::Error);
    CHECK_THROWS_AS(first->reset_heldout(-1), sao::Error);
    std::set<std::string> heldout_keys;
    for (int64_t i = 0; i < std::min<int64_t>(heldout, 100); ++i) {
      const auto one = first->reset_heldout(i);
      const auto two = second->reset_heldout(i);
      CHECK(record(one) == record(two));
      const auto key = key_of(one);
      REQUIRE_MESSAGE(!key.empty(), "held-out resets must carry info.episode_key");
      heldout_keys.insert(key);
    }
    int leaks = 0;
    for (uint64_t seed = 0; seed < 400; ++seed) leaks += heldout_keys.count(key_of(first->reset(seed * 7919 + 1)));
    CHECK(leaks == 0);
  }
}

TEST_CASE("example environment: echo three words with per-turn rewards") {
  sao::env::ExampleEnvironment env({});
  auto step = env.reset(7);
  REQUIRE(step.observation.rfind("say ", 0) == 0);
  CHECK(step.observation.size() == 7);
  double total = 0.0;
  for (int turn = 0; turn < 3; ++turn) {
    REQUIRE_FALSE(step.done());
    const std::string word = step.observation.substr(4);
    step = env.step(" " + word + "\n");  // whitespace is ignored
    CHECK(step.reward == doctest::Approx(1.0 / 3.0));
    total += step.reward;
  }
  CHECK(step.terminated);
  CHECK_FALSE(step.truncated);
  CHECK(step.info["accuracy"].get<double>() == doctest::Approx(1.0));
  CHECK(step.info["success"].get<int>() == 1);
  CHECK(total == doctest::Approx(1.0));

  // A wrong echo earns nothing on that turn; accuracy is the fraction right.
  step = env.reset(7);
  step = env.step("zzzz");
  CHECK(step.reward == 0.0);
  step = env.step(step.observation.substr(4));
  step = env.step(step.observation.substr(4));
  CHECK(step.info["accuracy"].get<double>() == doctest::Approx(2.0 / 3.0));
  CHECK(step.info["success"].get<int>() == 0);

  // on_training_step is recorded (shown at the end of the episode).
  env.on_training_step(42);
  env.reset(1);
  for (int turn = 0; turn < 2; ++turn) env.step("x");
  CHECK(env.step("x").info["learner_step"].get<int64_t>() == 42);
}

TEST_CASE("example environment: demonstrations replay through the environment") {
  sao::env::ExampleEnvironment env({});
  const auto demos = env.demonstrations(5, 3);
  REQUIRE(demos.size() == 5);
  for (size_t i = 0; i < demos.size(); ++i) {
    // Demonstration i is the episode reset(splitmix64(seed) + i) starts.
    auto step = env.reset(sao::base::splitmix64(3) + i);
    CHECK(step.observation == demos[i].prompt);
    for (const auto& turn : demos[i].turns) {
      step = env.step(turn.action);
      CHECK(step.observation == turn.observation);
    }
    CHECK(step.info["success"].get<int>() == 1);
  }
}

TEST_CASE("example environment: config errors name the key") {
  CHECK_THROWS_WITH_AS(make_environment("example", {{"turnz", 3}}, "cfg.task"), doctest::Contains("turnz"), sao::Error);
  CHECK_THROWS_WITH_AS(make_environment("example", {{"turns", 0}}, "cfg.task"), doctest::Contains("cfg.task.turns"),
                       sao::Error);
  CHECK_THROWS_WITH_AS(make_environment("example", {{"turns", "3"}}, "cfg.task"), doctest::Contains("turns"),
                       sao::Error);
  auto env = make_environment("example", {{"name", "example"}, {"turns", 2}, {"heldout_size", 5}}, "cfg");
  CHECK(env->limits().max_turns == 2);
  CHECK(env->heldout_size() == 5);
}
