// `sao train` with rollout.weights_dtype bf16: the rollout decodes with a
// bf16 replica fed the bf16 form of every version (checked), the learner
// trains in fp32, and the lag-0 log-prob gap the run reports is bf16's:
// above the fp32 run's float noise, within DIS's band. A tiny model for a
// few steps; nothing here waits on the clock.
#include "test_tiny_run.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>

namespace {

// The largest lag-0 gap over the run's steps, and the tokens it covered.
struct Gap {
  double largest = 0;
  double tokens = 0;
  double outside_band = 0;
};

Gap lag0_gap(const sao_test::fs::path& run_dir) {
  Gap gap;
  for (const auto& line : sao_test::lines_of(run_dir / "metrics.jsonl")) {
    if (line.contains("eval") || line.contains("event") || !line.contains("lag0_tokens")) continue;
    gap.tokens += line["lag0_tokens"].get<double>();
    if (line.contains("logprob_gap_lag0_max") && line["logprob_gap_lag0_max"].is_number()) {
      gap.largest = std::max(gap.largest, line["logprob_gap_lag0_max"].get<double>());
    }
    if (line.contains("logprob_outside_dis_lag0_frac") && line["logprob_outside_dis_lag0_frac"].is_number()) {
      gap.outside_band += line["logprob_outside_dis_lag0_frac"].get<double>();
    }
  }
  return gap;
}

}  // namespace

TEST_CASE("rollout.weights_dtype bf16: the run trains on a bf16 replica's samples, checked, with bf16's lag-0 gap") {
  sao_test::RunFixture bf16_run("bf16_rollout");
  const auto bf16 = bf16_run.train("--steps 4 --set rollout.weights_dtype=" + sao_test::quoted("\"bf16\""));
  INFO(bf16.output);
  REQUIRE(bf16.exit_code == 0);
  CHECK(sao_test::step_numbers(bf16_run.run_dir) == sao_test::one_to(4));
  CHECK(bf16.output.find("rollout-0 (cpu, bf16 replica) receives weights by caf_bytes") != std::string::npos);
  CHECK(bf16.output.find("do not match the version's checksum") == std::string::npos);
  CHECK(bf16.output.find("note: rollouts decode a bf16 replica on the CPU") != std::string::npos);

  sao_test::RunFixture fp32_run("fp32_rollout");
  const auto fp32 = fp32_run.train("--steps 4");
  INFO(fp32.output);
  REQUIRE(fp32.exit_code == 0);
  CHECK(fp32.output.find("rollout-0 (cpu) receives weights by caf_bytes") != std::string::npos);

  const auto bf16_gap = lag0_gap(bf16_run.run_dir);
  const auto fp32_gap = lag0_gap(fp32_run.run_dir);
  MESSAGE("lag-0 gap: bf16 " << bf16_gap.largest << " over " << bf16_gap.tokens << " tokens, fp32 " << fp32_gap.largest
                             << " over " << fp32_gap.tokens);
  REQUIRE(bf16_gap.tokens > 0);
  REQUIRE(fp32_gap.tokens > 0);
  // fp32 on both sides agrees to float noise; a bf16 replica's rounding
  // shows, and stays inside DIS's band.
  CHECK(fp32_gap.largest < 1e-5);
  CHECK(bf16_gap.largest > 1e-4);
  CHECK(bf16_gap.outside_band == 0);
  CHECK(fp32_gap.outside_band == 0);
}
