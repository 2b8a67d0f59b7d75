// Metrics sink: one JSON line per learner step and per evaluation in
// RUN_DIR/metrics.jsonl (flushed per line), the live progress line, and the
// run summary (latency percentiles, idle time, lost episodes) at the end.
#pragma once

#include "actors/messages.hpp"

#include <nlohmann/json.hpp>

#include <string>

namespace sao::actors {

struct MetricsActorConfig {
  std::string run_dir;
  int64_t total_steps = 0;
};

// Spawns the actor (state and behaviour are private to the .cpp).
caf::actor spawn_metrics_actor(caf::actor_system& system, MetricsActorConfig config);

}  // namespace sao::actors
