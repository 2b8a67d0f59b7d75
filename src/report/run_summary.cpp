// Human summary of a finished run; see run_summary.hpp.
#include "report/run_summary.hpp"

#include "base/json_parse.hpp"
#include "report/metrics_line.hpp"
#include "report/progress.hpp"
#include "report/time_accounting.hpp"

#include <algorithm>
#include <cmath>
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

// 12345 -> "12,345".
std::string with_thousands_separators(int64_t value) {
  std::string digits = std::to_string(value < 0 ? -value : value);
  for (auto at = static_cast<std::ptrdiff_t>(digits.size()) - 3; at > 0; at -= 3) digits.insert(at, ",");
  return value < 0 ? "-" + digits : digits;
}

// The final line about log-prob agreement at lag 0 (see LogprobAgreement);
// "" when the summary does not carry it.
std::string describe_logprob_agreement(const nlohmann::json& summary) {
  if (!has_number(summary, "lag0_tokens")) return "";
  const auto tokens = summary["lag0_tokens"].get<int64_t>();
  if (tokens <= 0) return "log-prob agreement at lag 0: not measured (no action token was trained at staleness 0)\n";
  if (!has_number(summary, "logprob_gap_lag0_max") || !has_number(summary, "logprob_outside_dis_lag0_tokens")) {
    return "";
  }
  const auto outside = summary["logprob_outside_dis_lag0_tokens"].get<int64_t>();
  char gap[32];
  std::snprintf(gap, sizeof(gap), "%.2g", summary["logprob_gap_lag0_max"].get<double>());
  std::string text = "log-prob agreement at lag 0: max |rollout - learner| " + std::string(gap) + " over " +
                     with_thousands_separators(tokens) + " tokens; " + with_thousands_separators(outside);
  if (outside > 0) {
    char share[32];
    std::snprintf(share, sizeof(share), " (%.2g%%)",
                  100.0 * static_cast<double>(outside) / static_cast<double>(tokens));
    text += share;
  }
  return text + " outside DIS's band\n";
}

}  // namespace

void LogprobAgreement::add_step(const nlohmann::json& line) {
  if (!has_number(line, "lag0_tokens")) return;
  seen_ = true;
  const auto tokens = line["lag0_tokens"].get<int64_t>();
  if (tokens <= 0 || !has_number(line, "logprob_gap_lag0_max") || !has_number(line, "logprob_outside_dis_lag0_frac"))
    return;
  tokens_ += tokens;
  gap_max_ = std::max(gap_max_, line["logprob_gap_lag0_max"].get<double>());
  // The fraction is outside / tokens of that step: the product rounds back to the count.
  outside_ += std::llround(line["logprob_outside_dis_lag0_frac"].get<double>() * static_cast<double>(tokens));
}

void LogprobAgreement::add_to_summary(nlohmann::json& summary) const {
  if (!seen_) return;
  summary["lag0_tokens"] = tokens_;
  if (tokens_ == 0) return;
  summary["logprob_gap_lag0_max"] = gap_max_;
  summary["logprob_outside_dis_lag0_tokens"] = outside_;
}

void add_counts(nlohmann::json& eval_line, const std::map<std::string, double>& counts) {
  for (const auto& [name, value] : counts) eval_line[kCountPrefix + name] = number_to_json(value);
}

void add_summary_counts(nlohmann::json& summary, const nlohmann::json& first_eval, const nlohmann::json& last_eval) {
  const auto first = counts_of_eval_line(first_eval);
  const auto lasts = counts_of_eval_line(last_eval);  // named: items() of a temporary would dangle
  for (const auto& [name, last] : lasts.items()) {
    if (!first.contains(name)) continue;
    summary[kCountPrefix + name + "_first"] = first[name];
    summary[kCountPrefix + name + "_last"] = last;
  }
}

nlohmann::json counts_of_eval_line(const nlohmann::json& eval_line) {
  nlohmann::json counts = nlohmann::json::object();
  if (!eval_line.is_object()) return counts;
  const std::string prefix = kCountPrefix;
  for (const auto& [key, value] : eval_line.items()) {
    if (key.size() > prefix.size() && key.compare(0, prefix.size(), prefix) == 0 && value.is_number()) {
      counts[key.substr(prefix.size())] = value;
    }
  }
  return counts;
}

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
  // The environment's held-out counts, last and before RL: count_NAME_last
  // and count_NAME_first (a run from before counts were generic wrote
  // arithmetic's as worked_last / worked_first).
  const std::string prefix = kCountPrefix;
  const std::string last_suffix = "_last";
  for (const auto& [key, last] : summary.items()) {
    const bool old_worked = key == "worked_last";
    const bool count = key.size() > prefix.size() + last_suffix.size() && key.compare(0, prefix.size(), prefix) == 0 &&
                       key.compare(key.size() - last_suffix.size(), last_suffix.size(), last_suffix) == 0;
    if (!old_worked && !count) continue;
    const auto stem = key.substr(0, key.size() - last_suffix.size());
    const auto first = stem + "_first";
    if (!last.is_number() || !has_number(summary, first.c_str())) continue;
    const auto name = old_worked ? std::string("worked") : stem.substr(prefix.size());
    text += "held-out " + name + ": " + base::dump_json(last);
    if (total > 0) text += " of " + std::to_string(total);
    text += " (before RL: " + base::dump_json(summary[first]) + ")\n";
  }
  text += "steps: " + std::to_string(summary.value("steps", 0LL)) + ", episodes lost " +
          std::to_string(summary.value("episodes_lost", 0LL)) + ", wall time " + format_duration(wall_s) + "\n";
  text += describe_logprob_agreement(summary);
  if (summary.contains("time_accounting") && summary["time_accounting"].is_object())
    text += describe_time_accounting(summary["time_accounting"]) + "\n";
  text += "files: " + run_dir +
          "/ (metrics.jsonl, summary.json with every number, checkpoint/policy for sao eval); "
          "curves: sao plot " +
          run_dir + "\n";
  return text;
}

}  // namespace sao::report
