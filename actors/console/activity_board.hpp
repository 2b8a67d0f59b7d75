// What a detached actor is doing while it cannot read its mailbox. A
// learner in a long evaluation or step answers a status request only
// afterwards; before such a job it posts what it does here, and the
// introspection actor reads the board instead of waiting for a reply, so
// the console shows the actor as busy with its activity (never as
// unresponsive) and answers at once. Thread-safe; one board per process.
#pragma once

#include "actors/protocol.hpp"

#include <chrono>
#include <optional>
#include <string>

namespace sao::actors {

struct Activity {
  std::string what;  // "evaluating", "training", "checkpointing"
  int64_t step = 0;  // the learner step it works at
  std::chrono::steady_clock::time_point since = std::chrono::steady_clock::now();
  msg::ActorStatus status;  // the actor's own status as the job began: its numbers and counters
};

// The newest activity `actor` posted and has not finished, if any.
std::optional<Activity> current_activity(const caf::actor_addr& actor);

// The status the console shows for an actor busy with `activity`: its status
// from the job's start, in state "busy", with the activity and busy_for_s.
msg::ActorStatus busy_status(const Activity& activity);

// Posts `activity` for `actor` for the scope's lifetime; nested scopes
// stack (an evaluation inside a step shows as evaluating, then training).
class ActivityScope {
 public:
  ActivityScope(caf::actor_addr actor, Activity activity);
  ~ActivityScope();
  ActivityScope(const ActivityScope&) = delete;
  ActivityScope& operator=(const ActivityScope&) = delete;

 private:
  caf::actor_addr actor_;
};

}  // namespace sao::actors
