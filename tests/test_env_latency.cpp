// Simulated environment latency (env/latency.hpp): the draws have the
// documented means and caps, and bad settings name their key.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "base/error.hpp"
#include "env/latency.hpp"

using sao::env::LatencyModel;

namespace {
std::vector<double> draws(const LatencyModel& model, int count, uint64_t seed = 3) {
  std::mt19937_64 rng(seed);
  std::vector<double> out;
  for (int i = 0; i < count; ++i) out.push_back(model.draw_ms(rng));
  return out;
}
double mean(const std::vector<double>& values) {
  double sum = 0;
  for (double v : values) sum += v;
  return sum / static_cast<double>(values.size());
}
}  // namespace

TEST_CASE("no latency draws 0 and leaves the generator alone") {
  LatencyModel model;
  std::mt19937_64 rng(1), untouched(1);
  CHECK(model.draw_ms(rng) == 0.0);
  CHECK(rng() == untouched());
  CHECK_FALSE(model.enabled());
}

TEST_CASE("fixed, uniform and lognormal latencies have the configured mean") {
  LatencyModel model;
  model.mean_ms = 100.0;
  SUBCASE("fixed") {
    model.distribution = "fixed";
    for (double d : draws(model, 100)) CHECK(d == 100.0);
  }
  SUBCASE("uniform in [0, 200]") {
    model.distribution = "uniform";
    const auto values = draws(model, 200000);
    CHECK(*std::min_element(values.begin(), values.end()) >= 0.0);
    CHECK(*std::max_element(values.begin(), values.end()) <= 200.0);
    // sd of the mean: 57.7 / sqrt(200000) = 0.13.
    CHECK(mean(values) == doctest::Approx(100.0).epsilon(0.01));
  }
  SUBCASE("lognormal: long tail, mean near 100 below a high cap, never above the cap") {
    model.distribution = "lognormal";
    model.max_ms = 600000.0;
    const auto values = draws(model, 400000);
    // sd of the mean at sigma 1: 100 * sqrt(e - 1) / sqrt(400000) = 0.21.
    CHECK(mean(values) == doctest::Approx(100.0).epsilon(0.02));
    auto sorted = values;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted[sorted.size() / 2] == doctest::Approx(60.65).epsilon(0.02));  // median exp(mu) = 100 e^-0.5
    CHECK(sorted[sorted.size() * 99 / 100] > 500.0);                           // p99 = 6.2 x mean
    model.max_ms = 300.0;
    for (double d : draws(model, 10000)) CHECK(d <= 300.0);
    model.max_ms = 0.0;  // default cap: 20 x mean
    for (double d : draws(model, 10000)) CHECK(d <= 2000.0);
  }
}

TEST_CASE("bad latency settings name the key, the range and the value") {
  LatencyModel model;
  model.distribution = "gamma";
  CHECK_THROWS_WITH(model.validate("c.env"),
                    "c.env.latency: must be \"none\", \"fixed\", \"uniform\" or \"lognormal\", got \"gamma\"");
  model.distribution = "fixed";
  CHECK_THROWS_WITH(model.validate("c.env"), "c.env.latency_ms: must be > 0 with latency \"fixed\"");
  model.mean_ms = -1;
  CHECK_THROWS_WITH(model.validate("c.env"), "c.env.latency_ms: must be in [0, 600000], got -1");
  model.mean_ms = 100;
  model.sigma = 0;
  CHECK_THROWS_WITH(model.validate("c.env"), "c.env.latency_sigma: must be in (0, 4], got 0");
  model.sigma = 1;
  model.max_ms = 50;
  CHECK_THROWS_WITH(model.validate("c.env"),
                    "c.env.latency_max_ms: 50 is below latency_ms 100: the cap would change the mean");
  model.max_ms = 0;
  CHECK_NOTHROW(model.validate("c.env"));
}
