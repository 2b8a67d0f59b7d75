// The few lines a person reads when a training run ends: held-out accuracy
// before and after, the environment's own held-out counts (arithmetic's
// worked answers), evaluation
// errors, where the time went and where the files are. Everything else
// stays in RUN_DIR/summary.json.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>

namespace sao::report {

// " -- WARNING: E of T held-out episodes lost to environment errors ..."
// for an evaluation that lost episodes (its accuracy covers only the
// answered ones), "" when none was lost.
std::string heldout_errors_note(int64_t errors, int64_t total);

// An environment's held-out counts (info "counts", summed) go into an eval
// line as flat keys "count_NAME" (a metrics line holds scalars only): a
// whole number as an integer, anything else as a number.
constexpr const char* kCountPrefix = "count_";
void add_counts(nlohmann::json& eval_line, const std::map<std::string, double>& counts);
// The counts of an eval line, {"NAME": value}; {} when it has none.
nlohmann::json counts_of_eval_line(const nlohmann::json& eval_line);
// summary.json's count_NAME_first and count_NAME_last (flat keys: the
// summary is a metrics line too), for each count both evaluations have.
void add_summary_counts(nlohmann::json& summary, const nlohmann::json& first_eval, const nlohmann::json& last_eval);

// The run's log-prob agreement at lag 0, gathered from the step lines'
// lag0_tokens, logprob_gap_lag0_max and logprob_outside_dis_lag0_frac (the
// learner's, algo/learner.hpp) for summary.json and the final line.
class LogprobAgreement {
 public:
  // A line without lag0_tokens adds nothing; one with lag-0 tokens but no
  // finite gap (a non-finite forward pass) adds nothing either.
  void add_step(const nlohmann::json& line);
  // Sets summary.json's lag0_tokens (the run's total), and when it is > 0
  // logprob_gap_lag0_max (the run's max) and logprob_outside_dis_lag0_tokens;
  // nothing when no step line carried lag0_tokens.
  void add_to_summary(nlohmann::json& summary) const;

 private:
  bool seen_ = false;
  int64_t tokens_ = 0;
  int64_t outside_ = 0;
  double gap_max_ = 0.0;
};

// `summary` is summary.json's object (the metrics actor's); `wall_s` the
// command's own wall time. Lines end with '\n'. Keys the summary lacks
// are left out rather than printed as placeholders.
std::string describe_run_summary(const nlohmann::json& summary, const std::string& run_dir, double wall_s);

}  // namespace sao::report
