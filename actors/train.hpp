// Entry point of an RL run inside one process: builds the actor system,
// spawns the coordinator, waits for the run to finish (or for a stop
// request, e.g. SIGINT/SIGTERM), and returns what happened. This header is
// CAF-free so the CLI can call it without pulling the actor framework in.
#pragma once

#include "config/run_config.hpp"
#include "model/transformer.hpp"

#include <atomic>
#include <string>

namespace sao::actors {

struct TrainOutcome {
  int64_t steps = 0;
  int64_t policy_version = 0;
  bool failed = false;       // the learner exited, or supervision gave up on an actor (exit status 1)
  std::string reason;        // for people: "budget", "stopped on request", "learner failed: ..."
  std::string summary_json;  // RUN_DIR/summary.json as the metrics sink wrote it ("" if none)
  int64_t actors_left_running = 0;
};

TrainOutcome run_training(const config::RunConfig& config, model::CausalLM policy, const std::string& resume_from,
                          const std::atomic<bool>* stop_requested);

}  // namespace sao::actors
