// The few lines a person reads when a training run ends: held-out accuracy
// before and after, worked answers where the task counts them, evaluation
// errors, where the time went and where the files are. Everything else
// stays in RUN_DIR/summary.json.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace sao::report {

// " -- WARNING: E of T held-out episodes lost to environment errors ..."
// for an evaluation that lost episodes (its accuracy covers only the
// answered ones), "" when none was lost.
std::string heldout_errors_note(int64_t errors, int64_t total);

// `summary` is summary.json's object (the metrics actor's); `wall_s` the
// command's own wall time. Lines end with '\n'. Keys the summary lacks
// are left out rather than printed as placeholders.
std::string describe_run_summary(const nlohmann::json& summary, const std::string& run_dir, double wall_s);

}  // namespace sao::report
