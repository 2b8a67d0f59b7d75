// Arithmetic task tests. Why the exhaustive split checks: a held-out problem
// leaking into training would make every evaluation number meaningless, and
// nothing downstream could notice, so the partition is checked over the whole
// problem space and against many train draws.
#include <doctest/doctest.h>

#include <limits>
#include <random>
#include <set>
#include <string>

#include "base/error.hpp"
#include "env/tasks/arithmetic.hpp"
#include "env/tasks/arithmetic_env.hpp"

using sao::env::ArithmeticConfig;
using sao::env::ArithmeticProblem;
using sao::env::ArithmeticTask;
using sao::env::Split;

namespace {

ArithmeticConfig small_config() {
  ArithmeticConfig config;
  config.min_digits = 1;
  config.max_digits = 2;
  config.operators = "+-*";
  return config;
}

std::string validation_error(const ArithmeticConfig& config) {
  try {
    config.validate();
  } catch (const sao::Error& e) {
    return e.what();
  }
  return "no throw";
}

}  // namespace

TEST_CASE("prompt, answer and sft text formatting") {
  const ArithmeticProblem add{12, '+', 34};
  CHECK(add.prompt() == "12+34=");
  CHECK(add.answer() == "46");
  CHECK(add.result() == 46);
  CHECK(ArithmeticTask::sft_text(add) == "12+34=46");

  const ArithmeticProblem sub{3, '-', 10};
  CHECK(sub.prompt() == "3-10=");
  CHECK(sub.answer() == "-7");
  CHECK(sub.result() == -7);

  const ArithmeticProblem zero{5, '-', 5};
  CHECK(zero.answer() == "0");

  const ArithmeticProblem mul{99, '*', 99};
  CHECK(mul.prompt() == "99*99=");
  CHECK(mul.answer() == "9801");

  const ArithmeticProblem big{999999999, '*', 999999999};
  CHECK(big.answer() == "999999998000000001");

  CHECK_THROWS_AS(ArithmeticProblem({1, '/', 2}).result(), sao::Error);
}

TEST_CASE("verifier accepts exactly the canonical answer") {
  const ArithmeticProblem add{12, '+', 34};
  CHECK(ArithmeticTask::verify(add, "46"));
  CHECK(ArithmeticTask::verify(add, " 46\n"));
  CHECK(ArithmeticTask::verify(add, "\t\r\n46 \v\f"));
  CHECK_FALSE(ArithmeticTask::verify(add, "046"));
  CHECK_FALSE(ArithmeticTask::verify(add, "+46"));
  CHECK_FALSE(ArithmeticTask::verify(add, "46.0"));
  CHECK_FALSE(ArithmeticTask::verify(add, "4 6"));
  CHECK_FALSE(ArithmeticTask::verify(add, "45"));
  CHECK_FALSE(ArithmeticTask::verify(add, "466"));
  CHECK_FALSE(ArithmeticTask::verify(add, ""));
  CHECK_FALSE(ArithmeticTask::verify(add, "   \n"));
  CHECK_FALSE(ArithmeticTask::verify(add, "forty-six"));
  CHECK_FALSE(ArithmeticTask::verify(add, "46=46"));
  CHECK_FALSE(ArithmeticTask::verify(add, std::string("46\0", 3)));
  CHECK_FALSE(ArithmeticTask::verify(add, "\xFF\xFE"));

  const ArithmeticProblem neg{3, '-', 10};
  CHECK(ArithmeticTask::verify(neg, "-7"));
  CHECK(ArithmeticTask::verify(neg, " -7 "));
  CHECK_FALSE(ArithmeticTask::verify(neg, "7"));
  CHECK_FALSE(ArithmeticTask::verify(neg, "- 7"));
  CHECK_FALSE(ArithmeticTask::verify(neg, "-07"));
  CHECK_FALSE(ArithmeticTask::verify(neg, "--7"));

  const ArithmeticProblem zero{0, '*', 7};
  CHECK(ArithmeticTask::verify(zero, "0"));
  CHECK_FALSE(ArithmeticTask::verify(zero, "-0"));
  CHECK_FALSE(ArithmeticTask::verify(zero, "00"));
}

TEST_CASE("verifier survives absurdly long digit strings") {
  const ArithmeticProblem add{12, '+', 34};
  CHECK_FALSE(ArithmeticTask::verify(add, std::string(100000, '9')));
  CHECK_FALSE(ArithmeticTask::verify(add, "46" + std::string(5000, '0')));
  CHECK_FALSE(ArithmeticTask::verify(add, "-" + std::string(400, '9')));
}

TEST_CASE("train/test split partitions the whole small problem space") {
  const ArithmeticConfig config = small_config();
  std::set<ArithmeticProblem> test_problems;
  int64_t total = 0;
  for (char op : config.operators) {
    for (int64_t a = 0; a <= 99; ++a) {
      for (int64_t b = 0; b <= 99; ++b) {
        const ArithmeticProblem p{a, op, b};
        ++total;
        const Split split = sao::env::split_of(p, config.test_fraction);
        // Deterministic: asking again gives the same answer.
        REQUIRE(split == sao::env::split_of(p, config.test_fraction));
        if (split == Split::kTest) test_problems.insert(p);
      }
    }
  }
  REQUIRE(total == 30000);
  const double fraction = static_cast<double>(test_problems.size()) / static_cast<double>(total);
  CAPTURE(fraction);
  CHECK(fraction > 0.07);
  CHECK(fraction < 0.13);

  const ArithmeticTask task(config);
  for (const auto& p : task.test_set()) CHECK(test_problems.count(p) == 1);

  // No train draw, from any seed, ever lands in the held-out split.
  for (uint64_t seed : {0ULL, 1ULL, 42ULL, 0xDEADBEEFULL, 987654321ULL}) {
    std::mt19937_64 rng(seed);
    int64_t leaks = 0;
    for (int i = 0; i < 20000; ++i) {
      const ArithmeticProblem p = task.sample_train(rng);
      if (test_problems.count(p) != 0) ++leaks;
      if (sao::env::split_of(p, config.test_fraction) != Split::kTrain) ++leaks;
    }
    CAPTURE(seed);
    CHECK(leaks == 0);
  }
}

TEST_CASE("train samples respect the config ranges and cover every operator") {
  ArithmeticConfig config;
  config.min_digits = 2;
  config.max_digits = 3;
  config.operators = "-*";
  const ArithmeticTask task(config);
  std::mt19937_64 rng(7);
  std::set<char> ops;
  std::set<size_t> digit_counts;
  for (int i = 0; i < 5000; ++i) {
    const ArithmeticProblem p = task.sample_train(rng);
    REQUIRE(p.a >= 10);
    REQUIRE(p.a <= 999);
    REQUIRE(p.b >= 10);
    REQUIRE(p.b <= 999);
    ops.insert(p.op);
    digit_counts.insert(std::to_string(p.a).size());
  }
  CHECK(ops == std::set<char>{'-', '*'});
  CHECK(digit_counts == std::set<size_t>{2, 3});

  // 1-digit configs include 0 as an operand.
  ArithmeticConfig tiny;
  tiny.max_digits = 1;
  tiny.test_size = 5;
  const ArithmeticTask tiny_task(tiny);
  bool saw_zero = false;
  for (int i = 0; i < 2000 && !saw_zero; ++i) {
    const ArithmeticProblem p = tiny_task.sample_train(rng);
    saw_zero = p.a == 0 || p.b == 0;
  }
  CHECK(saw_zero);
}

TEST_CASE("sample_train is reproducible for a given seed") {
  const ArithmeticTask task(small_config());
  std::mt19937_64 rng1(99);
  std::mt19937_64 rng2(99);
  for (int i = 0; i < 1000; ++i) REQUIRE(task.sample_train(rng1) == task.sample_train(rng2));
}

TEST_CASE("test set is deterministic, distinct, sized and held out") {
  const ArithmeticConfig config = small_config();
  const ArithmeticTask first(config);
  const ArithmeticTask second(config);
  CHECK(first.test_set() == second.test_set());
  REQUIRE(first.test_set().size() == static_cast<size_t>(config.test_size));
  const std::set<ArithmeticProblem> distinct(first.test_set().begin(), first.test_set().end());
  CHECK(distinct.size() == first.test_set().size());
  for (const auto& p : first.test_set()) {
    CHECK(sao::env::split_of(p, config.test_fraction) == Split::kTest);
  }

  // A large space is served cheaply from sampling alone.
  ArithmeticConfig wide;
  wide.min_digits = 1;
  wide.max_digits = 9;
  wide.operators = "+-*";
  const ArithmeticTask wide_task(wide);
  CHECK(wide_task.test_set().size() == 400);
  for (const auto& p : wide_task.test_set()) {
    CHECK(sao::env::split_of(p, wide.test_fraction) == Split::kTest);
  }
}

TEST_CASE("test set can take every held-out problem of a tiny space") {
  ArithmeticConfig config;
  config.max_digits = 1;
  config.operators = "+";
  int available = 0;
  for (int64_t a = 0; a <= 9; ++a) {
    for (int64_t b = 0; b <= 9; ++b) {
      if (sao::env::split_of({a, '+', b}, config.test_fraction) == Split::kTest) ++available;
    }
  }
  REQUIRE(available > 0);
  config.test_size = available;
  const ArithmeticTask task(config);
  CHECK(task.test_set().size() == static_cast<size_t>(available));

  config.test_size = available + 1;
  const std::string message = validation_error(config);
  CHECK(message.find("task.test_size") != std::string::npos);
  CHECK(message.find(std::to_string(available + 1)) != std::string::npos);
  CHECK_THROWS_AS(ArithmeticTask{config}, sao::Error);
}

TEST_CASE("config validation errors name the key") {
  CHECK(validation_error(ArithmeticConfig{}) == "no throw");

  auto expect_key = [](ArithmeticConfig config, const std::string& key) {
    const std::string message = validation_error(config);
    CAPTURE(message);
    CHECK(message.find("task." + key) != std::string::npos);
  };
  ArithmeticConfig c;

  c = {};
  c.min_digits = 0;
  expect_key(c, "min_digits");
  c = {};
  c.min_digits = 3;
  c.max_digits = 2;
  expect_key(c, "max_digits");
  c = {};
  c.max_digits = 10;
  expect_key(c, "max_digits");
  c = {};
  c.operators = "";
  expect_key(c, "operators");
  c = {};
  c.operators = "+/";
  expect_key(c, "operators");
  c = {};
  c.operators = "+ ";
  expect_key(c, "operators");
  c = {};
  c.test_fraction = 0.0;
  expect_key(c, "test_fraction");
  c = {};
  c.test_fraction = 0.51;
  expect_key(c, "test_fraction");
  c = {};
  c.test_fraction = -0.1;
  expect_key(c, "test_fraction");
  c = {};
  c.test_fraction = std::numeric_limits<double>::quiet_NaN();
  expect_key(c, "test_fraction");
  c = {};
  c.test_size = 0;
  expect_key(c, "test_size");
  c = {};
  c.test_size = 1000000;  // far more than the ~1000 held-out problems of the default config
  expect_key(c, "test_size");

  c = {};
  c.test_fraction = 0.5;
  CHECK(validation_error(c) == "no throw");
}

TEST_CASE("reversed answers: sign first, digits least significant first") {
  using sao::env::ArithmeticProblem;
  using sao::env::ArithmeticTask;
  const ArithmeticProblem carry{47, '+', 85};  // 132
  CHECK(ArithmeticTask::target_text(carry, "reversed") == "231");
  CHECK(ArithmeticTask::target_text(carry, "plain") == "132");
  CHECK(ArithmeticTask::verify(carry, "231", "reversed"));
  CHECK_FALSE(ArithmeticTask::verify(carry, "132", "reversed"));
  const ArithmeticProblem negative{3, '-', 15};  // -12
  CHECK(ArithmeticTask::target_text(negative, "reversed") == "-21");
  CHECK(ArithmeticTask::sft_text(negative, "reversed") == "3-15=-21");
  sao::env::ArithmeticConfig config;
  config.answer_format = "backwards";
  CHECK_THROWS_WITH(config.validate(), doctest::Contains("task.answer_format"));
}

TEST_CASE("carry-forgotten answers: digit-wise, no carry or borrow") {
  CHECK(ArithmeticTask::carry_forgotten_result({19, '+', 23}) == 32);  // 9+3=12 -> 2, 1+2 -> 3
  CHECK(ArithmeticTask::carry_forgotten_result({95, '+', 7}) == 92);   // 5+7 -> 2, 9 -> 9
  CHECK(ArithmeticTask::carry_forgotten_result({12, '+', 34}) == 46);  // no carry: the right answer
  CHECK(ArithmeticTask::carry_forgotten_result({42, '-', 17}) == 35);  // |2-7| = 5, 4-1 = 3
  CHECK(ArithmeticTask::carry_forgotten_result({3, '-', 10}) == -13);  // b > a: -(10 ~ 3) = -13
  CHECK(ArithmeticTask::carry_forgotten_result({30, '-', 30}) == 0);
  CHECK(ArithmeticTask::carry_forgotten_result({0, '+', 0}) == 0);
  CHECK(ArithmeticTask::carry_forgotten_result({7, '*', 8}) == 56);  // '*' is left right
}

TEST_CASE("demonstrations slip at the configured rate and not at rate 0") {
  ArithmeticConfig config;
  const ArithmeticProblem carry{19, '+', 23};
  SUBCASE("rate 0: the right answer, and the generator is not touched") {
    const ArithmeticTask task(config);
    std::mt19937_64 rng(5), untouched(5);
    CHECK(task.demonstration_text(carry, rng) == "42");
    CHECK(rng() == untouched());
  }
  SUBCASE("rate 1: always the slip, in the answer format") {
    config.demonstration_slip_rate = 1.0;
    config.answer_format = "reversed";
    const ArithmeticTask task(config);
    std::mt19937_64 rng(5);
    CHECK(task.demonstration_text(carry, rng) == "23");          // 32 reversed
    CHECK(task.demonstration_text({12, '+', 34}, rng) == "64");  // nothing to forget: 46 reversed
  }
  SUBCASE("rate 0.3: about 30% of carry problems") {
    config.demonstration_slip_rate = 0.3;
    const ArithmeticTask task(config);
    std::mt19937_64 rng(11);
    int slips = 0;
    for (int i = 0; i < 10000; ++i) slips += task.demonstration_text(carry, rng) == "32";
    CHECK(slips > 2800);  // 10,000 draws: sd 46, so +-200 is > 4 sd
    CHECK(slips < 3200);
  }
  SUBCASE("out of range is an error naming the key") {
    config.demonstration_slip_rate = 1.5;
    CHECK_THROWS_WITH(config.validate(), doctest::Contains("task.demonstration_slip_rate: must be in [0, 1], got 1.5"));
    config.demonstration_slip_rate = std::numeric_limits<double>::quiet_NaN();
    CHECK_THROWS_WITH(config.validate(), doctest::Contains("task.demonstration_slip_rate"));
  }
}

TEST_CASE("worked answers: reversed digits, '>', the answer; graded by the answer alone") {
  CHECK(ArithmeticTask::worked_text(42) == "w24>42");
  CHECK(ArithmeticTask::worked_text(-12) == "w-21>-12");
  CHECK(ArithmeticTask::worked_text(0) == "w0>0");
  CHECK(ArithmeticTask::worked_text(198) == "w891>198");

  const ArithmeticProblem add{19, '+', 23};
  CHECK(ArithmeticTask::verify(add, "w24>42"));
  CHECK(ArithmeticTask::verify(add, " w24> 42\n"));
  CHECK(ArithmeticTask::verify(add, "w99>42"));  // the work is not graded
  CHECK(ArithmeticTask::verify(add, "w>1>42"));  // the last '>' starts the answer
  CHECK_FALSE(ArithmeticTask::verify(add, "w24>32"));
  CHECK_FALSE(ArithmeticTask::verify(add, "w24>"));
  CHECK_FALSE(ArithmeticTask::verify(add, "w24"));
  CHECK_FALSE(ArithmeticTask::verify(add, "24>42"));  // no 'w': not a worked answer, so exact match
  CHECK_FALSE(ArithmeticTask::verify(add, ">42"));
  CHECK_FALSE(ArithmeticTask::verify(add, "w24>42>"));
  CHECK(ArithmeticTask::is_worked(" w24>42"));
  CHECK_FALSE(ArithmeticTask::is_worked("42"));
  CHECK_FALSE(ArithmeticTask::is_worked(""));

  const ArithmeticProblem neg{3, '-', 15};
  CHECK(ArithmeticTask::verify(neg, "w-21>-12"));
  CHECK_FALSE(ArithmeticTask::verify(neg, "w-21>12"));
}

TEST_CASE("demonstrations show their work at the configured rate") {
  ArithmeticConfig config;
  const ArithmeticProblem carry{19, '+', 23};
  SUBCASE("rate 1: always worked") {
    config.demonstration_worked_rate = 1.0;
    const ArithmeticTask task(config);
    std::mt19937_64 rng(5);
    CHECK(task.demonstration_text(carry, rng) == "w24>42");
    CHECK(task.demonstration_text({3, '-', 15}, rng) == "w-21>-12");
  }
  SUBCASE("with slips: the slipped value, worked") {
    config.demonstration_worked_rate = 1.0;
    config.demonstration_slip_rate = 1.0;
    const ArithmeticTask task(config);
    std::mt19937_64 rng(5);
    CHECK(task.demonstration_text(carry, rng) == "w23>32");
  }
  SUBCASE("rate 0.3: about 30% worked, the rest plain") {
    config.demonstration_worked_rate = 0.3;
    const ArithmeticTask task(config);
    std::mt19937_64 rng(11);
    int worked = 0;
    int plain = 0;
    for (int i = 0; i < 10000; ++i) {
      const auto text = task.demonstration_text(carry, rng);
      worked += text == "w24>42";
      plain += text == "42";
    }
    CHECK(worked + plain == 10000);
    CHECK(worked > 2800);  // 10,000 draws: sd 46, so +-200 is > 4 sd
    CHECK(worked < 3200);
  }
  SUBCASE("out of range, or with reversed answers, is an error naming the key") {
    config.demonstration_worked_rate = -0.1;
    CHECK_THROWS_WITH(config.validate(),
                      doctest::Contains("task.demonstration_worked_rate: must be in [0, 1], got -0.1"));
    config.demonstration_worked_rate = std::numeric_limits<double>::quiet_NaN();
    CHECK_THROWS_WITH(config.validate(), doctest::Contains("task.demonstration_worked_rate"));
    config.demonstration_worked_rate = 0.5;
    config.answer_format = "reversed";
    CHECK_THROWS_WITH(config.validate(),
                      doctest::Contains("task.demonstration_worked_rate: a worked answer writes the reversed digits "
                                        "before the answer, so it needs answer_format \"plain\""));
  }
}

TEST_CASE("the arithmetic environment says whether an answer was worked") {
  ArithmeticConfig config;
  sao::env::ArithmeticEnvironment environment(config);
  environment.reset(3);
  const auto answer = environment.problem().result();
  auto step = environment.step(ArithmeticTask::worked_text(answer));
  CHECK(step.reward == 1.0);
  CHECK(step.info["counts"] == nlohmann::json{{"worked", 1}, {"worked_correct", 1}});
  environment.reset(4);
  step = environment.step(std::to_string(environment.problem().result()));
  CHECK(step.reward == 1.0);
  CHECK(step.info["counts"] == nlohmann::json{{"worked", 0}, {"worked_correct", 0}});
}
