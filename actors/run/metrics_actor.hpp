// Metrics sink: one JSON line per learner step, per evaluation and per
// operator command in RUN_DIR/metrics.jsonl (flushed per line; commands also
// in RUN_DIR/control.log), the live progress line, the run summary (latency
// percentiles, idle time, lost episodes) at the end, and the recent history
// the console and dashboard read (`history_atom`).
#pragma once

#include "actors/protocol.hpp"
#include "replay/replay_buffer.hpp"

#include <nlohmann/json.hpp>

#include <string>

namespace sao::actors {

struct MetricsActorConfig {
  std::string run_dir;
  int64_t total_steps = 0;
  int64_t eval_every = 0;       // train.eval_every: the progress line's ETA counts the evaluations left
  replay::ReplayConfig replay;  // the replay knobs' values at start (live `set` changes them)
  // >= 0 when resuming from a checkpoint of that step: metrics.jsonl is
  // rewound to it (report/metrics_rewind.hpp) and the counters, evaluations
  // and history continue from what it holds.
  int64_t resume_step = -1;
  // Episodes the rollouts had in flight when the resumed run stopped: one
  // batch (slots) per local rollout actor, the same count a
  // lost cluster node is charged. Added to episodes_lost on resume.
  int64_t in_flight_per_resume = 0;
};

// Reply to (history_atom, since_step): a report::MetricsHistory with the
// step lines after since_step (at most the last kHistoryReplyLimit), the
// evaluations, operator commands, current live knob values, the newest step
// line and the summary so far.
constexpr size_t kHistoryKeptSteps = 20000;
constexpr size_t kHistoryReplyLimit = 2000;

// Spawns the actor (state and behaviour are private to the .cpp).
MetricsActor spawn_metrics_actor(caf::actor_system& system, MetricsActorConfig config);

}  // namespace sao::actors
