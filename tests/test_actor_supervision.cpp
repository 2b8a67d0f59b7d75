// The coordinator's restart budget: N failures of one actor within the
// window end it; failures spread wider than the window never do; each
// streak remembers the error that began it. Time is passed in, so nothing
// here depends on the clock.
#include "actors/supervision.hpp"

#include <doctest/doctest.h>

using sao::actors::RestartBudget;
using namespace std::chrono_literals;

TEST_CASE("restart budget: the Nth failure within the window is refused, with the first error kept") {
  RestartBudget budget(3, 60s);
  const auto t0 = RestartBudget::Clock::time_point{} + 1000s;
  CHECK(budget.allow_restart("rollout-0", "first", t0));
  CHECK(budget.allow_restart("rollout-0", "second", t0 + 10s));
  CHECK(budget.allow_restart("env-0", "other actor", t0 + 11s));  // counted apart
  CHECK_FALSE(budget.allow_restart("rollout-0", "third", t0 + 20s));
  CHECK(budget.first_error("rollout-0") == "first");
  CHECK(budget.failures_in_window("rollout-0") == 3);
  CHECK(budget.failures_in_window("env-0") == 1);
  CHECK(budget.first_error("nobody").empty());
}

TEST_CASE("restart budget: failures further apart than the window start a new streak") {
  RestartBudget budget(2, 60s);
  const auto t0 = RestartBudget::Clock::time_point{} + 1000s;
  for (int i = 0; i < 10; ++i) {
    CHECK(budget.allow_restart("env-0", "failure " + std::to_string(i), t0 + i * 61s));
    CHECK(budget.first_error("env-0") == "failure " + std::to_string(i));
  }
  CHECK_FALSE(budget.allow_restart("env-0", "close behind", t0 + 9 * 61s + 1s));
  CHECK(budget.first_error("env-0") == "failure 9");
}

TEST_CASE("restart budget of one: the first failure ends it") {
  RestartBudget budget(1, 1s);
  CHECK_FALSE(budget.allow_restart("rollout-1", "boom"));
}
