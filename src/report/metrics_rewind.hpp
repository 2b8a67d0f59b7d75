// Resuming a run from a checkpoint: the metrics file must continue where
// the checkpoint is, with no step twice. Everything written after the
// checkpoint's step (steps the resumed run will train again, evaluations and
// operator commands of that lost stretch, a line torn by kill -9) is moved
// out of metrics.jsonl into a side file, so nothing is silently deleted.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace sao::report {

struct RewoundMetrics {
  std::vector<nlohmann::json> steps;   // step lines with step <= the checkpoint's, in file order
  std::vector<nlohmann::json> evals;   // {"eval": true, ...} lines up to it
  std::vector<nlohmann::json> events;  // {"event": ...} operator commands up to it
  int64_t moved_lines = 0;             // lines moved out (after the checkpoint, or not parseable)
  std::string moved_to;                // the side file they were appended to ("" if none)
  // What the checkpoint does not hold, from what the file says: trajectories
  // the learner trained after it (the "trajectories" of the step lines moved
  // out) and those left queued in replay at the last step line written.
  int64_t trained_after_checkpoint = 0;
  int64_t queued_at_last_step = 0;
  // The "episodes_lost" of the last step line written (lost after the
  // checkpoint too: a cluster node's in-flight batch, a timed-out env).
  int64_t lost_at_last_step = 0;
};

// Rewrites `metrics_path` (atomically) to hold only the lines of steps
// <= `checkpoint_step`, appending the rest to
// `<metrics_path minus .jsonl>.after-step-<checkpoint_step>.jsonl`. A
// missing file is an empty history. Throws sao::Error naming the file when
// it cannot be read or written.
RewoundMetrics rewind_metrics_file(const std::string& metrics_path, int64_t checkpoint_step);

}  // namespace sao::report
