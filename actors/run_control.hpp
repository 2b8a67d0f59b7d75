// The parts of running a coordinator that a one-process run (train.cpp) and a
// cluster learner (node.cpp) share: waiting for RunFinished while relaying a
// stop request, and counting the actors still alive at the end.
#pragma once

#include "actors/messages.hpp"
#include "actors/train.hpp"

#include <atomic>

namespace sao::actors {

// Blocks until the coordinator reports RunFinished; sends it a stop when
// *stop_requested turns true (nullptr: never).
TrainOutcome await_run_finished(caf::scoped_actor& self, const caf::actor& coordinator,
                                const std::atomic<bool>* stop_requested);

// Gives exiting actors a moment (an env stuck in a slow call finishes it
// first), then counts what is still alive besides the caller's scoped actor
// (should be 0).
int64_t actors_left_running(caf::actor_system& system);

}  // namespace sao::actors
