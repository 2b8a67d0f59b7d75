// Typed metrics lines (report/metrics_line.hpp): what the metrics sink hands
// the console instead of JSON text, and the JSON the console serves from it.
#include "report/metrics_line.hpp"
#include "report/metrics_rewind.hpp"
#include "report/progress.hpp"
#include "report/run_summary.hpp"

#include "base/error.hpp"

#include <doctest/doctest.h>

#include <unistd.h>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

using sao::report::metrics_line_from_json;
using sao::report::MetricsHistory;
using sao::report::to_json;

TEST_CASE("a metrics line comes back as the sink wrote it") {
  const auto line = nlohmann::json::parse(
      R"({"step":25,"accuracy":0.375,"entropy":null,"eval":true,"split":"test","trajectories":64.0,"big":1e300})");
  const auto typed = metrics_line_from_json(line, "line");
  CHECK(typed.numbers.at("step") == 25.0);
  CHECK(std::isnan(typed.numbers.at("entropy")));
  CHECK(typed.flags.at("eval"));
  CHECK(typed.texts.at("split") == "test");
  const auto back = to_json(typed);
  CHECK(back.dump() ==
        R"({"accuracy":0.375,"big":1e+300,"entropy":null,"eval":true,"split":"test","step":25,"trajectories":64})");
  CHECK(back["step"].is_number_integer());
  CHECK(back["accuracy"].is_number_float());
}

TEST_CASE("a metrics line is flat: nested values are refused by key") {
  CHECK_THROWS_WITH_AS(metrics_line_from_json(nlohmann::json::parse(R"({"step":1,"evals":[1]})"), "summary"),
                       "summary: key 'evals' holds array; a metrics line holds numbers, strings, booleans and nulls "
                       "only",
                       sao::Error);
  CHECK_THROWS_WITH_AS(metrics_line_from_json(nlohmann::json::array(), "latest"),
                       "latest: a metrics line must be a JSON object", sao::Error);
}

TEST_CASE("the console's history has the shape the dashboard reads") {
  MetricsHistory history;
  history.steps.push_back(metrics_line_from_json(nlohmann::json::parse(R"({"step":3,"reward_mean":0.5})"), "s"));
  history.evals.push_back(metrics_line_from_json(nlohmann::json::parse(R"({"step":0,"accuracy":0.25})"), "e"));
  history.knobs = {{"max_staleness", 4.0}, {"rollouts_paused", 0.0}};
  history.summary = metrics_line_from_json(nlohmann::json::parse(R"({"steps":3,"accuracy_first":0.25})"), "sum");
  auto json = to_json(history);
  CHECK(json["latest"].is_null());
  CHECK(json["steps"][0]["reward_mean"] == 0.5);
  CHECK(json["events"].is_array());
  CHECK(json["events"].empty());
  CHECK(json["knobs"]["max_staleness"] == 4);
  CHECK(json["summary"]["evals"][0]["accuracy"] == 0.25);
  CHECK(json["summary"]["steps"] == 3);
  history.has_latest = true;
  history.latest = history.steps[0];
  CHECK(to_json(history)["latest"]["step"] == 3);
}

TEST_CASE("rewinding metrics.jsonl to a checkpoint keeps steps up to it and moves the rest aside") {
  namespace fs = std::filesystem;
  const auto dir = fs::temp_directory_path() / ("sao_test_rewind_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto path = (dir / "metrics.jsonl").string();
  {
    std::ofstream out(path);
    out << R"({"eval":true,"step":0,"accuracy":0.25})"
        << "\n"
        << R"({"step":1,"episodes_lost":1,"dropped_stale":2})"
        << "\n"
        << R"({"event":"pause","step":1})"
        << "\n"
        << R"({"step":2,"episodes_lost":3,"dropped_stale":1,"trajectories":4.0,"queued_after":9.0})"
        << "\n"
        << R"({"step":3,"episodes_lost":4,"trajectories":5.0,"queued_after":2.0})"
        << "\n"
        << R"({"eval":true,"step":3,"accuracy":0.5})"
        << "\n"
        << R"({"step":4,"episo)";  // torn by a kill
  }
  const auto rewound = sao::report::rewind_metrics_file(path, 2);
  CHECK(rewound.steps.size() == 2);
  CHECK(rewound.steps.back()["episodes_lost"] == 3);
  CHECK(rewound.evals.size() == 1);
  CHECK(rewound.events.size() == 1);
  CHECK(rewound.moved_lines == 3);
  // Trained after the checkpoint: step 3's 5; left in replay at the last
  // whole step line (3): 2. The torn line counts for neither.
  CHECK(rewound.trained_after_checkpoint == 5);
  CHECK(rewound.queued_at_last_step == 2);
  CHECK(rewound.lost_at_last_step == 4);
  CHECK(rewound.moved_to == (dir / "metrics.after-step-2.jsonl").string());
  std::ifstream kept(path);
  std::stringstream kept_text;
  kept_text << kept.rdbuf();
  CHECK(kept_text.str() ==
        "{\"eval\":true,\"step\":0,\"accuracy\":0.25}\n{\"step\":1,\"episodes_lost\":1,\"dropped_stale\":2}\n"
        "{\"event\":\"pause\",\"step\":1}\n"
        "{\"step\":2,\"episodes_lost\":3,\"dropped_stale\":1,\"trajectories\":4.0,\"queued_after\":9.0}\n");
  std::ifstream moved(rewound.moved_to);
  std::stringstream moved_text;
  moved_text << moved.rdbuf();
  CHECK(moved_text.str().find("{\"step\":3,") == 0);
  // Rewinding again to the same step changes nothing.
  CHECK(sao::report::rewind_metrics_file(path, 2).moved_lines == 0);
  fs::remove_all(dir);
}

TEST_CASE("progress ETA counts the held-out evaluations left, not only the steps") {
  using sao::report::estimate_eta_seconds;
  using sao::report::evaluations_left;
  // Every 25 of 300 steps and at the end: after step 1, 25..275 and the final one.
  CHECK(evaluations_left(1, 300, 25) == 12);
  CHECK(evaluations_left(275, 300, 25) == 2);
  CHECK(evaluations_left(276, 300, 25) == 1);
  CHECK(evaluations_left(300, 300, 25) == 1);  // the final evaluation runs after the last step line
  CHECK(evaluations_left(5, 10, 0) == 1);
  CHECK(evaluations_left(301, 300, 25) == 0);
  // 130 s elapsed, of which one 30 s evaluation: 1 s a step for 200 steps,
  // then evaluations at 100, 200 and the end.
  CHECK(estimate_eta_seconds(130.0, 30.0, 1, 0, 100, 300, 100) == doctest::Approx(200.0 + 3 * 30.0));
  // At the last step only the final evaluation is left (it used to say 0:00).
  CHECK(estimate_eta_seconds(330.0, 30.0, 1, 0, 300, 300, 100) == doctest::Approx(30.0));
  // A run resumed at step 200: its pace is measured over the steps it ran.
  CHECK(estimate_eta_seconds(80.0, 30.0, 1, 200, 250, 300, 0) == doctest::Approx(50.0 + 30.0));
  CHECK(estimate_eta_seconds(10.0, 10.0, 1, 0, 0, 300, 25) == 0.0);
}

TEST_CASE("a finished run ends with a few lines for a person, not summary.json's text") {
  const auto summary = nlohmann::json::parse(R"({"steps": 300, "episodes_lost": 2, "heldout_accuracy_first": 0.195,
      "heldout_accuracy_last": 0.9275, "count_worked_first": 36, "count_worked_last": 400,
      "evals": [{"step": 0, "total": 400}, {"step": 300, "total": 400}]})");
  CHECK(sao::report::describe_run_summary(summary, "runs/default", 497.0) ==
        "held-out accuracy: 0.9275 (before RL: 0.1950), 400 problems\n"
        "held-out worked: 400 of 400 (before RL: 36)\n"
        "steps: 300, episodes lost 2, wall time 8:17\n"
        "files: runs/default/ (metrics.jsonl, summary.json with every number, checkpoint/policy for sao eval); "
        "curves: sao plot runs/default\n");
  // A summary written before counts were generic says the same.
  auto old_run = summary;
  old_run.erase("count_worked_first");
  old_run.erase("count_worked_last");
  old_run["worked_first"] = 36;
  old_run["worked_last"] = 400;
  CHECK(sao::report::describe_run_summary(old_run, "runs/default", 497.0) ==
        sao::report::describe_run_summary(summary, "runs/default", 497.0));
  // A run stopped before any evaluation: no accuracy line, no placeholder.
  CHECK(sao::report::describe_run_summary(nlohmann::json::parse(R"({"steps": 0, "episodes_lost": 0})"), "r", 2.0) ==
        "steps: 0, episodes lost 0, wall time 0:02\n"
        "files: r/ (metrics.jsonl, summary.json with every number, checkpoint/policy for sao eval); "
        "curves: sao plot r\n");
}

TEST_CASE("the final lines say how well rollout and learner log-probs agreed at lag 0") {
  // Step lines as the sink writes them: the learner's numbers are doubles, NaN is null.
  sao::report::LogprobAgreement agreement;
  agreement.add_step(nlohmann::json::parse(R"({"step": 1, "lag0_tokens": 345.0, "logprob_gap_lag0_max": 0.5,
      "logprob_outside_dis_lag0_frac": 0.002898550724637681})"));  // 1 of 345
  agreement.add_step(nlohmann::json::parse(R"({"step": 2, "lag0_tokens": 12000.0, "logprob_gap_lag0_max": 3.1e-06,
      "logprob_outside_dis_lag0_frac": 0.0})"));
  agreement.add_step(nlohmann::json::parse(R"({"step": 3, "lag0_tokens": 0.0})"));  // every token stale
  agreement.add_step(nlohmann::json::parse(R"({"step": 4})"));                      // a rejected batch
  agreement.add_step(nlohmann::json::parse(R"({"step": 5, "lag0_tokens": 40.0, "logprob_gap_lag0_max": null,
      "logprob_outside_dis_lag0_frac": 0.0})"));  // a non-finite forward pass: not counted
  auto summary = nlohmann::json::parse(R"({"steps": 5, "episodes_lost": 0})");
  agreement.add_to_summary(summary);
  CHECK(summary["lag0_tokens"] == 12345);
  CHECK(summary["logprob_gap_lag0_max"] == 0.5);
  CHECK(summary["logprob_outside_dis_lag0_tokens"] == 1);
  CHECK(sao::report::describe_run_summary(summary, "r", 2.0) ==
        "steps: 5, episodes lost 0, wall time 0:02\n"
        "log-prob agreement at lag 0: max |rollout - learner| 0.5 over 12,345 tokens; 1 (0.0081%) outside DIS's "
        "band\n"
        "files: r/ (metrics.jsonl, summary.json with every number, checkpoint/policy for sao eval); "
        "curves: sao plot r\n");

  sao::report::LogprobAgreement agreeing;
  agreeing.add_step(nlohmann::json::parse(R"({"lag0_tokens": 1234567.0, "logprob_gap_lag0_max": 3.1e-06,
      "logprob_outside_dis_lag0_frac": 0.0})"));
  nlohmann::json clean = {{"steps", 1}, {"episodes_lost", 0}};
  agreeing.add_to_summary(clean);
  CHECK(
      sao::report::describe_run_summary(clean, "r", 2.0)
          .find("\nlog-prob agreement at lag 0: max |rollout - learner| 3.1e-06 over 1,234,567 tokens; 0 outside DIS's "
                "band\n") != std::string::npos);

  // Only stale tokens: said so; no step line with the keys: no line, no key.
  sao::report::LogprobAgreement stale_only;
  stale_only.add_step(nlohmann::json::parse(R"({"lag0_tokens": 0.0})"));
  nlohmann::json stale = {{"steps", 1}, {"episodes_lost", 0}};
  stale_only.add_to_summary(stale);
  CHECK(stale == nlohmann::json{{"steps", 1}, {"episodes_lost", 0}, {"lag0_tokens", 0}});
  CHECK(sao::report::describe_run_summary(stale, "r", 2.0)
            .find("log-prob agreement at lag 0: not measured (no action token was trained at staleness 0)\n") !=
        std::string::npos);
  nlohmann::json none = {{"steps", 1}, {"episodes_lost", 0}};
  sao::report::LogprobAgreement().add_to_summary(none);
  CHECK(none == nlohmann::json{{"steps", 1}, {"episodes_lost", 0}});
  CHECK(sao::report::describe_run_summary(none, "r", 2.0).find("log-prob") == std::string::npos);
}
