// A metrics.jsonl line as typed fields, and the console's history made of
// them: what the metrics sink hands the console through an actor message
// (messages carry no JSON text). A line is flat: numbers (NaN stands for
// JSON null), texts and flags; to_json gives back the line as it is in
// metrics.jsonl (a whole number is written as an integer).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace sao::report {

struct MetricsLine {
  std::map<std::string, double> numbers;  // NaN: null
  std::map<std::string, std::string> texts;
  std::map<std::string, bool> flags;
};

// Throws sao::Error naming `where` and the key when `line` is not a flat
// object of numbers, strings, booleans and nulls.
MetricsLine metrics_line_from_json(const nlohmann::json& line, const std::string& where);
// A number as a metrics line writes it: a whole one (below 2^53) as an
// integer, a non-finite one as null.
nlohmann::json number_to_json(double value);
nlohmann::json to_json(const MetricsLine& line);

// The console's view of a run (GET /api/metrics): step lines after a step,
// evaluation lines, operator commands, the live knob values, the newest step
// line and the run summary so far.
struct MetricsHistory {
  std::vector<MetricsLine> steps;
  std::vector<MetricsLine> evals;
  std::vector<MetricsLine> events;
  std::map<std::string, double> knobs;
  bool has_latest = false;
  MetricsLine latest;
  MetricsLine summary;  // without its "evals" list, which is `evals`
};

// {"steps", "evals", "events", "knobs", "latest" (null when none), "summary" (with "evals")}.
nlohmann::json to_json(const MetricsHistory& history);

}  // namespace sao::report
