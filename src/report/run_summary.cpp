// Human summary of a finished run; see run_summary.hpp.
#include "report/run_summary.hpp"

#include "report/progress.hpp"
#include "report/time_accounting.hpp"

#include <cstdio>

namespace sao::report {

namespace {

std::string fixed4(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.4f", value);
  return text;
}

bool has_number(const nlohmann::json& object, const char* key) {
  return object.is_object() && object.contains(key) && object[key].is_number();
}

}  // namespace

std::string heldout_errors_note(int64_t errors, int64_t total) {
  if (errors <= 0) return "";
  return " -- WARNING: " + std::to_string(errors) + " of " + std::to_string(total) +
         " held-out episodes lost to environment errors (not scored; the accuracy is over the " +
         std::to_string(total - errors) + " answered)";
}

std::string describe_run_summary(const nlohmann::json& summary, const std::string& run_dir, double wall_s) {
  std::string text;
  // Problems in the last evaluation (0 when unknown).
  const auto evals = summary.value("evals", nlohmann::json::array());
  const int64_t total = !evals.empty() && has_number(evals.back(), "total") ? evals.back()["total"].get<int64_t>() : 0;
  if (has_number(summary, "heldout_accuracy_last")) {
    text += "held-out accuracy: " + fixed4(summary["heldout_accuracy_last"].get<double>());
    if (has_number(summary, "heldout_accuracy_first"))
      text += " (before RL: " + fixed4(summary["heldout_accuracy_first"].get<double>()) + ")";
    if (total > 0) text += ", " + std::to_string(total) + " problems";
    text += heldout_errors_note(summary.value("heldout_errors_last", int64_t{0}), total) + "\n";
  }
  if (summary.value("worked_last", nlohmann::json()).is_number_integer() &&
      summary.value("worked_first", nlohmann::json()).is_number_integer()) {
    text += "worked answers: " + std::to_string(summary["worked_last"].get<long long>());
    if (total > 0) text += " of " + std::to_string(total);
    text += " (before RL: " + std::to_string(summary["worked_first"].get<long long>()) + ")\n";
  }
  text += "steps: " + std::to_string(summary.value("steps", 0LL)) + ", episodes lost " +
          std::to_string(summary.value("episodes_lost", 0LL)) + ", wall time " + format_duration(wall_s) + "\n";
  if (summary.contains("time_accounting") && summary["time_accounting"].is_object())
    text += describe_time_accounting(summary["time_accounting"]) + "\n";
  text += "files: " + run_dir + "/ (metrics.jsonl, summary.json with every number, checkpoint/policy for sao eval); "
          "curves: sao plot " + run_dir + "\n";
  return text;
}

}  // namespace sao::report
