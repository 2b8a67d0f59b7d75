// Typed metrics lines (report/metrics_line.hpp): what the metrics sink hands
// the console instead of JSON text, and the JSON the console serves from it.
#include "report/metrics_line.hpp"

#include "base/error.hpp"

#include <doctest/doctest.h>

#include <cmath>

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
