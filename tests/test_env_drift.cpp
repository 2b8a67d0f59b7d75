// The drifting environment and the recovery metric. Why exact hand-made
// series: recovery time is the number a drift experiment reports, so its
// definition (pre-switch level, window, first recovered step) is pinned down
// here step by step.
#include "base/error.hpp"
#include "env/tasks/drift_env.hpp"

#include <doctest/doctest.h>

#include <map>

using sao::env::DriftConfig;
using sao::env::DriftEnvironment;
using sao::env::recovery_after_switches;

TEST_CASE("drift: the regime switches at the configured learner steps") {
  DriftConfig config;
  config.switch_every = 10;
  DriftEnvironment env(config);
  CHECK(env.regime_index_at(0) == 0);
  CHECK(env.regime_index_at(9) == 0);
  CHECK(env.regime_index_at(10) == 1);
  CHECK(env.regime_index_at(19) == 1);
  CHECK(env.regime_index_at(20) == 0);
  CHECK(env.switch_steps(35) == std::vector<int64_t>{10, 20, 30});
  env.on_training_step(15);
  CHECK(env.regime().name == "reversed");
}

TEST_CASE("drift: the reward rule follows the regime and info reports it") {
  DriftConfig config;
  config.switch_every = 10;
  config.regimes = {"plain", "reversed", "plain+!"};
  DriftEnvironment env(config);
  // Find a training problem whose plain and reversed answers differ.
  uint64_t seed = 0;
  sao::env::ArithmeticProblem problem;
  for (;; ++seed) {
    const auto prompt = env.reset(seed).observation;
    env.step("");
    problem = {};
    const auto op = prompt.find_first_of("+-", 1);
    problem.a = std::stoll(prompt.substr(0, op));
    problem.op = prompt[op];
    problem.b = std::stoll(prompt.substr(op + 1, prompt.size() - op - 2));
    const auto answer = problem.answer();
    if (answer.size() >= 2 && answer.front() != '-' && answer.front() != answer.back()) break;
  }
  const std::string plain = problem.answer();
  const std::string reversed(plain.rbegin(), plain.rend());

  auto play = [&](const std::string& action) {
    env.reset(seed);
    return env.step(action);
  };
  env.on_training_step(0);
  CHECK(play(plain).reward == 1.0);
  CHECK(play(reversed).reward == 0.0);
  CHECK(play(plain).info["regime"] == "plain");
  env.on_training_step(10);
  CHECK(play(plain).reward == 0.0);
  const auto step = play(reversed);
  CHECK(step.reward == 1.0);
  CHECK(step.terminated);
  CHECK(step.info["regime"] == "reversed");
  CHECK(step.info["regime_index"] == 1);
  CHECK(step.info["accuracy"] == 1.0);
  env.on_training_step(25);
  CHECK(play(plain).reward == 0.0);
  CHECK(play(plain + "!").reward == 1.0);
  CHECK(play(" " + plain + "! ").reward == 1.0);

  // An episode keeps the regime it started with.
  env.on_training_step(0);
  env.reset(seed);
  env.on_training_step(10);
  CHECK(env.step(plain).reward == 1.0);

  // Demonstrations answer in the current regime.
  env.on_training_step(10);
  const auto demos = env.demonstrations(4, 1);
  REQUIRE(demos.size() == 4);
  CHECK(demos[0].turns.size() == 1);
}

namespace {
// How many demonstrations answer in each style, over problems whose plain and
// reversed answers differ (so the style is visible).
std::pair<int, int> count_styles(const std::vector<sao::env::SftEpisode>& demos) {
  int plain = 0;
  int reversed = 0;
  for (const auto& demo : demos) {
    const auto op = demo.prompt.find_first_of("+-", 1);
    sao::env::ArithmeticProblem problem;
    problem.a = std::stoll(demo.prompt.substr(0, op));
    problem.op = demo.prompt[op];
    problem.b = std::stoll(demo.prompt.substr(op + 1, demo.prompt.size() - op - 2));
    const std::string answer = problem.answer();
    const std::string backwards(answer.rbegin(), answer.rend());
    if (answer == backwards) continue;
    const std::string& action = demo.turns.at(0).action;
    if (action == answer) ++plain;
    if (action == backwards) ++reversed;
  }
  return {plain, reversed};
}
}  // namespace

TEST_CASE("drift: demonstrations answer in the current regime or in all of them") {
  DriftConfig config;
  config.switch_every = 10;
  config.task.operators = "+";
  DriftEnvironment current(config);
  current.on_training_step(10);
  const auto [plain_current, reversed_current] = count_styles(current.demonstrations(400, 7));
  CHECK(plain_current == 0);
  CHECK(reversed_current > 100);

  config.demonstration_regimes = "all";
  DriftEnvironment all(config);
  const auto [plain_all, reversed_all] = count_styles(all.demonstrations(400, 7));
  // Uniform over two regimes: each style near half of the ~300+ visible ones.
  CHECK(plain_all > 100);
  CHECK(reversed_all > 100);

  config.demonstration_regimes = "some";
  CHECK_THROWS_WITH_AS(DriftEnvironment{config}, doctest::Contains("demonstration_regimes"), sao::Error);
  CHECK_THROWS_WITH_AS(
      sao::env::make_drift_environment({{"demonstration_regimes", "every"}}, "cfg.task"),
      doctest::Contains("cfg.task.demonstration_regimes: expected \"current\" or \"all\", got \"every\""), sao::Error);
}

TEST_CASE("drift: a regime's operators decide which problems it asks") {
  DriftConfig config;
  config.switch_every = 10;
  config.task.operators = "+-";
  config.regimes = {"plain@+", "plain@-"};
  DriftEnvironment env(config);
  auto count_ops = [&env](uint64_t first_seed) {
    std::map<char, int> counts;
    for (uint64_t seed = first_seed; seed < first_seed + 200; ++seed) {
      const auto prompt = env.reset(seed).observation;
      counts[prompt[prompt.find_first_of("+-", 1)]] += 1;
      env.step("");
    }
    return counts;
  };
  CHECK(count_ops(0) == std::map<char, int>{{'+', 200}});
  env.on_training_step(10);
  CHECK(count_ops(0) == std::map<char, int>{{'-', 200}});
  CHECK(env.regime().name == "plain@-");
  CHECK(env.regime().operators == "-");
  // The held-out split keeps every operator.
  std::map<char, int> heldout;
  for (int64_t i = 0; i < env.heldout_size(); ++i) {
    const auto prompt = env.reset_heldout(i).observation;
    heldout[prompt[prompt.find_first_of("+-", 1)]] += 1;
  }
  CHECK(heldout.size() == 2);
  // "all" demonstrations draw problems from each regime's operators.
  config.demonstration_regimes = "all";
  std::map<char, int> demo_ops;
  for (const auto& demo : DriftEnvironment(config).demonstrations(200, 3)) {
    demo_ops[demo.prompt[demo.prompt.find_first_of("+-", 1)]] += 1;
  }
  CHECK(demo_ops['+'] > 60);
  CHECK(demo_ops['-'] > 60);
  // The held-out size is the whole task's, not one operator's share of it
  // (1-digit +-*: about 60 held-out problems, about 20 of them additions).
  DriftConfig small;
  small.task.max_digits = 1;
  small.task.operators = "+-*";
  small.task.test_fraction = 0.2;
  small.task.test_size = 50;
  small.regimes = {"plain@+", "plain@*"};
  CHECK(DriftEnvironment(small).heldout_size() == 50);
  // Suffix and operators together.
  const auto both = sao::env::DriftRegime::parse("reversed+!@-", "r");
  CHECK(both.answer_format == "reversed");
  CHECK(both.suffix == "!");
  CHECK(both.operators == "-");
}

TEST_CASE("drift: a worked answer is graded by its answer in every regime, as arithmetic grades it") {
  DriftConfig config;
  config.switch_every = 10;
  config.task.operators = "+";
  config.regimes = {"plain", "reversed", "plain+!"};
  DriftEnvironment env(config);
  // 19+23 = 42: its work writes the digits least significant first.
  const sao::env::ArithmeticProblem problem{19, '+', 23};
  const sao::env::DriftRegime plain = sao::env::DriftRegime::parse("plain", "t");
  const sao::env::DriftRegime reversed = sao::env::DriftRegime::parse("reversed", "t");
  const sao::env::DriftRegime bang = sao::env::DriftRegime::parse("plain+!", "t");
  CHECK(plain.accepts(problem, "w24>42"));
  CHECK(plain.accepts(problem, " w24> 42 "));
  CHECK(plain.accepts(problem, "w2>4>42"));  // the text after the last '>'
  CHECK_FALSE(plain.accepts(problem, "w42>24"));
  CHECK_FALSE(plain.accepts(problem, "w24>"));
  CHECK_FALSE(plain.accepts(problem, "x24>42"));  // not worked: the whole text is the answer
  CHECK(reversed.accepts(problem, "w24>24"));
  CHECK_FALSE(reversed.accepts(problem, "w24>42"));
  CHECK(bang.accepts(problem, "w24>42!"));
  CHECK_FALSE(bang.accepts(problem, "w24>42"));

  // The environment rewards either form and reports which one was used.
  const auto prompt = env.reset(0).observation;
  const auto op = prompt.find('+', 1);
  const sao::env::ArithmeticProblem asked{std::stoll(prompt.substr(0, op)), '+',
                                          std::stoll(prompt.substr(op + 1, prompt.size() - op - 2))};
  const auto worked = env.step(sao::env::ArithmeticTask::worked_text(asked.result()));
  CHECK(worked.reward == 1.0);
  CHECK(worked.info["counts"] == nlohmann::json{{"worked", 1}, {"worked_correct", 1}});
  env.reset(0);
  const auto direct = env.step(asked.answer());
  CHECK(direct.reward == 1.0);
  CHECK(direct.info["counts"] == nlohmann::json{{"worked", 0}, {"worked_correct", 0}});
  // Room for the longest worked answer: 2 digits + sign, twice, 'w', '>' and the suffix.
  CHECK(env.limits().max_action_bytes == 5 + 2 + 5 + 1);
}

TEST_CASE("drift: the teacher's worked answers shape a plain regime's demonstrations only") {
  DriftConfig config;
  config.switch_every = 10;
  config.task.operators = "+-";
  config.regimes = {"plain@+", "reversed@-"};
  config.task.demonstration_worked_rate = 1.0;
  DriftEnvironment env(config);
  const auto plain_demos = env.demonstrations(50, 3);
  REQUIRE(plain_demos.size() == 50);
  for (const auto& demo : plain_demos) {
    const auto& answer = demo.turns.at(0).action;
    REQUIRE(answer.front() == 'w');
    CHECK(answer.find('>') != std::string::npos);
    CHECK(demo.prompt.find('+', 1) != std::string::npos);
    sao::env::ArithmeticProblem problem;
    const auto op = demo.prompt.find('+', 1);
    problem.a = std::stoll(demo.prompt.substr(0, op));
    problem.b = std::stoll(demo.prompt.substr(op + 1, demo.prompt.size() - op - 2));
    CHECK(answer == sao::env::ArithmeticTask::worked_text(problem.result()));
    CHECK(env.regime().accepts(problem, answer));
  }
  env.on_training_step(10);
  for (const auto& demo : env.demonstrations(50, 3)) {
    CHECK(demo.turns.at(0).action.front() != 'w');
  }

  // The same key in a config, read and checked like arithmetic's.
  const auto from_json = sao::env::drift_config_from_json(
      {{"demonstration_worked_rate", 0.3}, {"demonstration_slip_rate", 0.1}}, "cfg.task");
  CHECK(from_json.task.demonstration_worked_rate == 0.3);
  CHECK(from_json.task.demonstration_slip_rate == 0.1);
  CHECK_THROWS_WITH_AS(sao::env::make_drift_environment({{"demonstration_worked_rate", 1.5}}, "cfg.task"),
                       "cfg.task.demonstration_worked_rate: must be a number in [0, 1], got 1.5", sao::Error);
  // At rate 0 (the default) every demonstration is its regime's target, as before the key existed.
  config.task.demonstration_worked_rate = 0.0;
  DriftEnvironment teacherless(config);
  for (const auto& demo : teacherless.demonstrations(20, 3)) {
    const auto op = demo.prompt.find('+', 1);
    REQUIRE(op != std::string::npos);
    const sao::env::ArithmeticProblem problem{std::stoll(demo.prompt.substr(0, op)), '+',
                                              std::stoll(demo.prompt.substr(op + 1, demo.prompt.size() - op - 2))};
    CHECK(demo.turns.at(0).action == problem.answer());
  }
}

TEST_CASE("drift: config errors name the key") {
  CHECK_THROWS_WITH_AS(sao::env::make_drift_environment({{"regimes", {"plain", "plain@"}}}, "cfg.task"),
                       "cfg.task.regimes[1]: regime \"plain@\" names no operators after '@'", sao::Error);
  CHECK_THROWS_WITH_AS(
      sao::env::make_drift_environment({{"regimes", {"plain@/"}}}, "cfg.task"),
      "cfg.task.regimes[0]: regime \"plain@/\" has unknown operator '/' after '@' (expected +, - or *)", sao::Error);
  CHECK_THROWS_WITH_AS(
      sao::env::make_drift_environment({{"operators", "+"}, {"regimes", {"plain", "plain@-"}}}, "cfg.task"),
      "cfg.task.regimes[1]: regime \"plain@-\" asks operator '-', which cfg.task.operators \"+\" does not include",
      sao::Error);
  CHECK_THROWS_WITH_AS(sao::env::make_drift_environment({{"regimes", {"plain", "upside-down"}}}, "cfg.task"),
                       doctest::Contains("upside-down"), sao::Error);
  CHECK_THROWS_WITH_AS(sao::env::make_drift_environment({{"switch_every", 0}}, "cfg.task"),
                       doctest::Contains("cfg.task.switch_every"), sao::Error);
  CHECK_THROWS_WITH_AS(sao::env::make_drift_environment({{"max_digits", 0}}, "cfg.task"),
                       doctest::Contains("max_digits"), sao::Error);
  CHECK_THROWS_WITH_AS(sao::env::make_drift_environment({{"answer_format", "plain"}}, "cfg.task"),
                       doctest::Contains("answer_format"), sao::Error);
}

TEST_CASE("recovery: exact on hand-made series") {
  // Steps 0..9 at 1.0; the regime switches at 10; reward climbs back.
  std::vector<double> rewards(10, 1.0);
  for (double r : {0.0, 0.0, 0.5, 1.0, 1.0, 1.0, 1.0}) rewards.push_back(r);  // steps 10..16
  // Window 3: pre-level = mean(r[7..9]) = 1. Post-switch windows end at
  // t = 12 (0.167), 13 (0.5), 14 (0.833), 15 (1.0): recovered at 15, 6 steps.
  auto result = recovery_after_switches(rewards, {10}, 3);
  REQUIRE(result.size() == 1);
  CHECK(result[0].switch_step == 10);
  CHECK(result[0].pre_level == doctest::Approx(1.0));
  CHECK(result[0].steps_to_recover == 6);
  // Tolerance 0.2: 0.833 >= 0.8 at t = 14: 5 steps.
  CHECK(recovery_after_switches(rewards, {10}, 3, 0.2)[0].steps_to_recover == 5);
  // Window 1 is the raw series: r[13] = 1 first -> 4 steps.
  CHECK(recovery_after_switches(rewards, {10}, 1)[0].steps_to_recover == 4);
  // A reward that never drops recovers as soon as one full window exists.
  CHECK(recovery_after_switches(std::vector<double>(20, 0.5), {10}, 4)[0].steps_to_recover == 4);

  // Two switches; the second is never recovered; the first's search stops at
  // the second switch, and the second's pre-level window stops at the first.
  std::vector<double> series = {0.2, 0.4, 0.6, 0.8,   // 0..3: pre-level over window 2 = 0.7
                                0.0, 0.9, 0.5, 0.7,   // 4..7: windows (t=5) 0.45, (6) 0.7 -> recovered, 3 steps
                                0.1, 0.1, 0.1, 0.1};  // 8..11: switch at 8, pre-level mean(r[6..7]) = 0.6
  result = recovery_after_switches(series, {4, 8}, 2);
  REQUIRE(result.size() == 2);
  CHECK(result[0].pre_level == doctest::Approx(0.7));
  CHECK(result[0].steps_to_recover == 3);
  CHECK(result[1].pre_level == doctest::Approx(0.6));
  CHECK(result[1].steps_to_recover == -1);
  // Window 4 before the second switch would reach back past the first: clipped to r[4..7].
  result = recovery_after_switches(series, {4, 6}, 4);
  CHECK(result[1].pre_level == doctest::Approx((0.0 + 0.9) / 2));
  // Not recovered when the series ends before a full window.
  CHECK(recovery_after_switches({1, 1, 1, 0, 1}, {3}, 3)[0].steps_to_recover == -1);

  CHECK_THROWS_AS(recovery_after_switches(series, {4}, 0), sao::Error);
  CHECK_THROWS_AS(recovery_after_switches(series, {0}, 2), sao::Error);
  CHECK_THROWS_AS(recovery_after_switches(series, {12}, 2), sao::Error);
  CHECK_THROWS_WITH_AS(recovery_after_switches(series, {8, 4}, 2), doctest::Contains("strictly increasing"),
                       sao::Error);
}
