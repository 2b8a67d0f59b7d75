// Time accounting: the numbers behind busy fractions and the runtime's share
// of CPU in summary.json. Exact sums on hand-made samples, the status-number
// round trip the metrics sink relies on, and the difference between wall and
// thread-CPU time that makes the runtime share meaningful on a busy machine.
#include "base/error.hpp"
#include "report/time_accounting.hpp"

#include <doctest/doctest.h>

#include <pthread.h>

#include <atomic>
#include <thread>

using sao::report::ActorTimeSample;
using sao::report::WorkTime;

TEST_CASE("time accounting: busy fractions and the CPU left outside the work, per node") {
  std::vector<ActorTimeSample> samples = {
      {"learner", "learner", "a", {10.0, 30.0, 1.5, {{"model", {8.0, 7.5, 100}}, {"weights", {0.5, 0.5, 100}}}}},
      {"rollout-0", "rollout", "a", {10.0, 31.0, 1.0, {{"model", {6.0, 5.0, 900}}}}},
      {"env-0", "env", "a", {10.0, 29.0, 1.25, {{"env", {1.0, 1.0, 900}}}}},
      {"rollout-1", "rollout", "b", {4.0, 3.0, 0.5, {{"model", {2.0, 2.5, 10}}}}},
      {"replay", "replay", "a", {10.0, 30.5, 1.0, {}}},
  };
  const auto summary = sao::report::summarise_time(samples);
  REQUIRE(summary["actors"].size() == 5);
  CHECK(summary["actors"][0]["busy_frac"].get<double>() == doctest::Approx(0.85));
  CHECK(summary["actors"][1]["busy_frac"].get<double>() == doctest::Approx(0.6));
  CHECK(summary["actors"][3]["busy_frac"].get<double>() == doctest::Approx(0.5));
  CHECK(summary["actors"][4]["busy_frac"].get<double>() == 0.0);
  CHECK(summary["actors"][0]["work"]["weights"]["calls"] == 100);
  // Node a: process CPU while its actors ran = largest sample (31) - smallest
  // at-start value (1) = 30; work CPU 7.5 + 5 + 0.5 + 1 = 14.
  const auto& a = summary["nodes"]["a"];
  CHECK(a["process_cpu_s"].get<double>() == 30.0);
  CHECK(a["model_cpu_s"].get<double>() == doctest::Approx(12.5));
  CHECK(a["weights_cpu_s"].get<double>() == doctest::Approx(0.5));
  CHECK(a["env_cpu_s"].get<double>() == doctest::Approx(1.0));
  CHECK(a["other_cpu_s"].get<double>() == doctest::Approx(16.0));
  CHECK(a["other_cpu_share"].get<double>() == doctest::Approx(16.0 / 30.0));
  CHECK(summary["nodes"]["b"]["process_cpu_s"].get<double>() == 2.5);
  CHECK(summary["nodes"]["b"]["other_cpu_s"].get<double>() == 0.0);
  // Work CPU above the process CPU (sampled moments apart) is floored, never negative.
  samples[3].time.process_cpu_s = 2.0;
  const auto floored = sao::report::summarise_time(samples);
  CHECK(floored["nodes"]["b"]["other_cpu_s"].get<double>() == 0.0);
  CHECK(floored["nodes"]["b"]["other_cpu_share"].get<double>() == 0.0);
}

TEST_CASE("time accounting: the end-of-run line") {
  const std::vector<ActorTimeSample> samples = {
      {"learner", "learner", "a", {10.0, 31.0, 1.0, {{"model", {9.5, 9.0, 100}}}}},
      {"rollout-0", "rollout", "a", {10.0, 31.0, 1.0, {{"model", {2.0, 2.0, 900}}}}},
      {"rollout-1", "rollout", "b", {10.0, 11.0, 1.0, {{"model", {1.0, 1.0, 900}}, {"weights", {1.0, 1.0, 5}}}}},
  };
  // Busy: learner 95%, rollouts (20% + 20%) / 2. CPU: a 30 s (11 in work), b 10 s (2 in work): 27 / 40.
  CHECK(sao::report::describe_time_accounting(sao::report::summarise_time(samples)) ==
        "time: learner busy 95.0%, rollout busy 20.0% (mean of 2), runtime and bookkeeping 67.5% of the CPU "
        "(time_accounting in summary.json)");
}

TEST_CASE("time accounting: bad samples are refused by name") {
  CHECK_THROWS_WITH_AS(sao::report::summarise_time({{"learner", "learner", "a", {0.0, 1.0, 0.0, {}}}}),
                       "time accounting: actor 'learner' has alive_s 0.000000 (must be > 0)", sao::Error);
  CHECK_THROWS_WITH_AS(sao::report::summarise_time({{"env-0", "env", "a", {1.0, 1.0, 0.0, {{"env", {-1.0, 0.0, 1}}}}}}),
                       "time accounting: actor 'env-0' has negative time in bucket 'env'", sao::Error);
}

TEST_CASE("time accounting: an account now, and the status numbers people read") {
  const std::map<std::string, WorkTime> work = {{"model", {2.0, 1.5, 7}}, {"weights", {0.25, 0.125, 3}}};
  const auto account = sao::report::time_account_now(4.0, 0.75, work);
  CHECK(account.alive_s == 4.0);
  CHECK(account.process_cpu_at_start_s == 0.75);
  CHECK(account.process_cpu_s > 0.0);  // this process has run
  CHECK(account.work.at("model").calls == 7);
  const auto numbers = sao::report::time_numbers(account);
  CHECK(numbers.at("work_model_wall_s") == 2.0);
  CHECK(numbers.at("work_weights_cpu_s") == 0.125);
  CHECK(numbers.at("work_model_calls") == 7.0);
  CHECK(numbers.at("alive_s") == 4.0);
  CHECK(numbers.at("process_cpu_s") == account.process_cpu_s);
  CHECK(numbers.at("process_cpu_at_start_s") == 0.75);
  CHECK(numbers.at("busy_frac") == doctest::Approx(2.25 / 4.0));
}

TEST_CASE("time accounting: a timer counts wall time always and CPU time only when the thread works") {
  WorkTime sleeping;
  {
    sao::report::WorkTimer timer(sleeping);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK(sleeping.calls == 1);
  CHECK(sleeping.wall_s >= 0.1);
  CHECK(sleeping.cpu_s < 0.05);  // asleep: the thread used (almost) no CPU

  WorkTime spinning;
  {
    sao::report::WorkTimer timer(spinning);
    const double start = sao::report::thread_cpu_seconds();
    volatile double sink = 0.0;
    while (sao::report::thread_cpu_seconds() - start < 0.05) sink = sink + 1.0;
  }
  CHECK(spinning.cpu_s >= 0.05);
  CHECK(spinning.wall_s >= spinning.cpu_s * 0.99);
  CHECK(sao::report::process_cpu_seconds() >= spinning.cpu_s);
}

TEST_CASE("time accounting: threads are summed by name, and a busy thread shows up under its own") {
  std::atomic<bool> stop{false};
  std::thread worker([&stop] {
    pthread_setname_np(pthread_self(), "sao.test.spin");
    const double start = sao::report::thread_cpu_seconds();
    volatile double sink = 0.0;
    while (sao::report::thread_cpu_seconds() - start < 0.1) sink = sink + 1.0;
    while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  std::map<std::string, double> threads;
  for (int attempt = 0; attempt < 500; ++attempt) {
    threads = sao::report::thread_cpu_by_name();
    if (threads.count("sao.test.spin") && threads.at("sao.test.spin") >= 0.1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  stop = true;
  worker.join();
  REQUIRE(threads.count("sao.test.spin") == 1);
  CHECK(threads.at("sao.test.spin") >= 0.1);
  CHECK(threads.at("sao.test.spin.threads") == 1.0);
  // The main thread, by the program's name, which Linux cuts at 15 bytes.
  CHECK(threads.at("test_time_accou.threads") >= 1.0);
}
