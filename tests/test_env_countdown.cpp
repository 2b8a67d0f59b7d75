// The countdown environment (src/env/tasks/countdown_env.hpp): the verifier's
// verdicts and reasons, the solver the demonstrations use, the split, and
// config errors.
#include "base/error.hpp"
#include "env/tasks/countdown_env.hpp"
#include "env/environment.hpp"

#include <doctest/doctest.h>

#include <set>
#include <string>

using sao::env::countdown_solutions;
using sao::env::CountdownEnvironment;
using sao::env::CountdownProblem;
using sao::env::make_environment;
using sao::env::verify_countdown;

namespace {

std::string countdown_reason(const CountdownProblem& problem, const std::string& action) {
  const auto verdict = verify_countdown(problem, action);
  CHECK_FALSE(verdict.correct);
  return verdict.reason;
}

std::string countdown_config_error(const nlohmann::json& config) {
  try {
    make_environment("countdown", config, "task");
  } catch (const sao::Error& error) {
    return error.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("countdown verifier: every number once, + - * and parentheses, the target's value") {
  const CountdownProblem problem{{12, 3, 7}, 33};
  CHECK(problem.prompt() == "12 3 7=33:");
  CHECK(verify_countdown(problem, "3*7+12").correct);
  CHECK(verify_countdown(problem, " 12 + 7 * 3\n").correct);
  CHECK(verify_countdown(problem, "(7*3)+12").correct);
  CHECK(verify_countdown(CountdownProblem{{12, 3, 7}, 57}, "(12+7)*3").correct);
  CHECK(countdown_reason(problem, "3*7+11") == "uses 11, which is not one of the numbers left");
  CHECK(countdown_reason(problem, "3*7+12+3") == "uses 3, which is not one of the numbers left");
  CHECK(countdown_reason(problem, "3*12") == "does not use 7");
  CHECK(countdown_reason(problem, "12+7+3") == "equals 22, not 33");
  CHECK(countdown_reason(problem, "") == "empty answer");
  CHECK(countdown_reason(problem, " \n") == "empty answer");
  CHECK(countdown_reason(problem, "-3+7*12") == "'-' at position 1 negates; '-' may only subtract");
  CHECK(countdown_reason(problem, "7*(-3)+12") == "'-' at position 4 negates; '-' may only subtract");
  CHECK(countdown_reason(problem, "3/7+12") == "unexpected '/' at position 2");
  CHECK(countdown_reason(problem, "3 * 7 / 12") == "unexpected '/' at position 7");  // positions as written
  CHECK(countdown_reason(problem, "3*7+12\xc3\xa9") == "unexpected byte 0xC3 at position 7");
  CHECK(countdown_reason(problem, "3*07+12") == "the number 07 has a leading zero");
  CHECK(countdown_reason(problem, "3*7+12+") == "not an expression: the expression ends early");
  CHECK(countdown_reason(problem, "3*(7+12") == "not an expression: the expression ends early");
  CHECK(countdown_reason(problem, "37*12") == "uses 37, which is not one of the numbers left");
  CHECK(countdown_reason(problem, "99999999999") == "uses 9999999..., which is not one of the numbers");
  CHECK(countdown_reason(problem, "12345678") == "uses 12345678, which is not one of the numbers");
  // Repeated numbers count as a multiset.
  CHECK(verify_countdown(CountdownProblem{{5, 5, 2}, 12}, "5+5+2").correct);
  CHECK(countdown_reason(CountdownProblem{{5, 5, 2}, 12}, "5+5+5") == "uses 5, which is not one of the numbers left");
}

TEST_CASE("countdown solutions: every parenthesis-free expression reaching the target, each once") {
  const CountdownProblem problem{{2, 2, 3}, 7};
  const std::vector<std::string> expected{"2*2+3", "2+2+3", "2+3+2", "3+2*2", "3+2+2"};
  CHECK(countdown_solutions(problem, "+-*") == expected);
  CHECK(countdown_solutions(problem, "+") == std::vector<std::string>{"2+2+3", "2+3+2", "3+2+2"});
  CHECK(countdown_solutions(CountdownProblem{{1, 2, 4}, 99}, "+-*").empty());
  for (const auto& solution : expected) CHECK(verify_countdown(problem, solution).correct);
}

TEST_CASE("countdown episodes: one turn, reward 1 only for a right expression, held-out problems apart") {
  auto environment = make_environment("countdown", nlohmann::json::object(), "task");
  auto* countdown = dynamic_cast<CountdownEnvironment*>(environment.get());
  REQUIRE(countdown != nullptr);
  CHECK(environment->heldout_size() == 400);
  std::set<std::string> heldout;
  for (int64_t i = 0; i < environment->heldout_size(); ++i) {
    const auto start = environment->reset_heldout(i);
    CHECK(heldout.insert(start.observation).second);  // distinct
  }
  for (uint64_t seed = 0; seed < 2000; ++seed) {
    const auto problem = countdown->sample_train(seed);
    REQUIRE_FALSE(countdown->is_heldout(problem));
    CHECK(heldout.count(problem.prompt()) == 0);
    CHECK(problem.numbers.size() == 3);
    CHECK(problem.target >= 0);
    CHECK(problem.target <= 99);
    CHECK_FALSE(countdown_solutions(problem, "+-*").empty());
  }
  const auto start = environment->reset(42);
  CHECK(start.observation == countdown->sample_train(42).prompt());
  const auto solution = countdown_solutions(countdown->sample_train(42), "+-*").front();
  const auto right = environment->step(solution);
  CHECK(right.reward == 1.0);
  CHECK(right.terminated);
  CHECK(right.info["success"] == true);
  CHECK_THROWS_WITH_AS(environment->step(solution),
                       "countdown environment: step() called before reset() or after the episode ended", sao::Error);
  environment->reset(42);
  const auto wrong = environment->step("1");
  CHECK(wrong.reward == 0.0);
  CHECK(wrong.info["accuracy"] == 0.0);
  CHECK_FALSE(wrong.info["reason"].get<std::string>().empty());
  CHECK_THROWS_WITH_AS(environment->reset_heldout(400), "countdown environment: held-out index 400 outside [0, 400)",
                       sao::Error);
}

TEST_CASE("countdown demonstrations solve their training problems with varied solutions") {
  const CountdownEnvironment environment(sao::env::CountdownConfig{});
  const auto episodes = environment.demonstrations(300, 5);
  REQUIRE(episodes.size() == 300);
  CHECK(environment.demonstrations(300, 5)[17].turns[0].action == episodes[17].turns[0].action);  // same seed
  std::set<std::string> first_numbers;
  const auto limits = environment.limits();
  for (const auto& episode : episodes) {
    REQUIRE(episode.turns.size() == 1);
    // The episode's problem, read back from its prompt.
    CountdownProblem problem;
    int64_t value = 0;
    for (const char byte : episode.prompt) {
      if (byte >= '0' && byte <= '9') {
        value = value * 10 + (byte - '0');
      } else if (byte == ' ' || byte == '=') {
        problem.numbers.push_back(value);
        value = 0;
      } else if (byte == ':') {
        problem.target = value;
      }
    }
    CHECK(problem.prompt() == episode.prompt);
    const auto verdict = verify_countdown(problem, episode.turns[0].action);
    INFO(episode.prompt, " ", episode.turns[0].action, ": ", verdict.reason);
    CHECK(verdict.correct);
    CHECK(static_cast<int64_t>(episode.turns[0].action.size()) <= limits.max_action_bytes);
    CHECK(static_cast<int64_t>(episode.prompt.size()) <= limits.max_observation_bytes);
    first_numbers.insert(episode.turns[0].action.substr(0, episode.turns[0].action.find_first_of("+-*")));
  }
  CHECK(first_numbers.size() > 10);  // solutions start with different numbers, not one canonical order
}

TEST_CASE("countdown config errors name the key") {
  CHECK(countdown_config_error({{"numbers", 1}}) == "task.numbers: must be an integer in [2, 5], got 1");
  CHECK(countdown_config_error({{"max_number", 0}, {"min_number", 1}}) == "task.max_number: must be >= min_number (1)");
  CHECK(countdown_config_error({{"operators", "+/"}}) ==
        "task.operators: must be a non-empty string of + - *, got \"+/\"");
  CHECK(countdown_config_error({{"max_target", -1}}) == "task.max_target: must be >= min_target (0)");
  CHECK(countdown_config_error({{"test_fraction", 1.0}}) == "task.test_fraction: must be a number in (0, 1), got 1.0");
  CHECK(countdown_config_error({{"name", "maze"}}) == "task.name: expected \"countdown\", got \"maze\"");
  CHECK(countdown_config_error({{"colour", 1}}).find("colour") != std::string::npos);
  // A target range nothing reaches.
  CHECK(countdown_config_error({{"min_target", 500000}, {"max_target", 500001}, {"max_number", 3}}) ==
        "countdown environment: no problem with a target in [500000, 500001] found; widen the target range");
}

TEST_CASE("countdown with turns: the verifier's reason comes back until the answer is right or turns run out") {
  auto environment = make_environment("countdown", {{"max_turns", 3}}, "task");
  auto* countdown = dynamic_cast<CountdownEnvironment*>(environment.get());
  REQUIRE(countdown != nullptr);
  CHECK(environment->limits().max_turns == 3);
  const auto problem = countdown->sample_train(9);
  const auto solution = countdown_solutions(problem, "+-*").front();
  const std::string wrong = std::to_string(problem.numbers[0]);  // does not use the other numbers

  environment->reset(9);
  auto step = environment->step(wrong);
  CHECK_FALSE(step.done());
  CHECK(step.reward == 0.0);
  CHECK(step.observation == "does not use " + std::to_string(std::min(problem.numbers[1], problem.numbers[2])) + ":");
  step = environment->step(solution);
  CHECK(step.terminated);
  CHECK(step.reward == 1.0);
  CHECK(step.info["success"] == true);
  CHECK(step.info["turns"] == 2);

  environment->reset(9);
  environment->step(wrong);
  environment->step(wrong);
  step = environment->step(wrong);
  CHECK(step.terminated);
  CHECK(step.reward == 0.0);
  CHECK(step.info["success"] == false);
  CHECK(step.info["turns"] == 3);
  CHECK_THROWS_AS(environment->step(solution), sao::Error);

  // A long reason is cut, so the observation stays within the stated limit.
  environment->reset(9);
  step = environment->step("(" + std::string(60, '0'));
  CHECK(step.observation == "the number 0000000... has a leading zero:");
  CHECK(static_cast<int64_t>(step.observation.size()) <= environment->limits().max_observation_bytes);
}

TEST_CASE("countdown demonstrations with retries: wrong attempts as context, the verifier's answer, then a solution") {
  const auto config =
      sao::env::countdown_config_from_json({{"max_turns", 3}, {"retry_demonstration_rate", 1.0}}, "task");
  const CountdownEnvironment environment(config);
  const auto episodes = environment.demonstrations(50, 2);
  for (const auto& episode : episodes) {
    REQUIRE(episode.turns.size() == 3);
    CHECK_FALSE(episode.turns[0].train);
    CHECK_FALSE(episode.turns[1].train);
    CHECK(episode.turns[2].train);
    CHECK(episode.turns[0].action != episode.turns[1].action);
    CHECK(episode.turns[0].observation.rfind("equals ", 0) == 0);
    CHECK(episode.turns[0].observation.back() == ':');
    CHECK(episode.turns[2].observation.empty());
  }
  // Rate 0 (the default): one turn, as without retries.
  const CountdownEnvironment no_retries(sao::env::countdown_config_from_json({{"max_turns", 3}}, "task"));
  for (const auto& episode : no_retries.demonstrations(50, 2)) CHECK(episode.turns.size() == 1);
  CHECK(countdown_config_error({{"max_turns", 0}}) == "task.max_turns: must be an integer in [1, 8], got 0");
  CHECK(countdown_config_error({{"retry_demonstration_rate", 1.5}}) ==
        "task.retry_demonstration_rate: must be a number in [0, 1], got 1.5");
}
