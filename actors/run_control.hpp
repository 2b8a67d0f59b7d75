// The parts of running a coordinator that a one-process run (train.cpp) and a
// cluster learner (node.cpp) share: the console endpoint, waiting for
// RunFinished while relaying a stop request, and counting the actors still
// alive at the end.
#pragma once

#include "actors/console/console_server.hpp"
#include "actors/protocol.hpp"
#include "actors/train.hpp"

#include <atomic>
#include <memory>

namespace sao::actors {

// The run's console endpoint when config.console.enabled; nullptr (with a
// message) when it is off or cannot bind. Reset it before the system ends.
std::unique_ptr<ConsoleServer> start_console(caf::actor_system& system, const CoordinatorActor& coordinator,
                                             const config::RunConfig& config);

// Blocks until the coordinator reports RunFinished; sends it a stop when
// *stop_requested turns true (nullptr: never).
TrainOutcome await_run_finished(caf::scoped_actor& self, const CoordinatorActor& coordinator,
                                const std::atomic<bool>* stop_requested);

// RUN_DIR/summary.json as text ("" when missing).
std::string read_summary(const std::string& run_dir);

// Gives exiting actors a moment (an env stuck in a slow call finishes it
// first), then counts what is still alive besides the caller's scoped actor
// (should be 0).
int64_t actors_left_running(caf::actor_system& system);

}  // namespace sao::actors
