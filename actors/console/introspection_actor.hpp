// Introspection actor: answers (snapshot_atom) with the status of every
// actor of the run (std::vector<msg::ActorStatus>), asking each one in
// parallel with a timeout, so a stuck actor shows up as "unresponsive"
// instead of holding the console up, and nothing is paused to take the
// picture. An actor busy in a long job it posted on the activity board
// (activity_board.hpp) shows as "busy" with that activity, at once. It learns the actors from the coordinator
// (actors_atom), so restarted and newly joined actors are always included.
#pragma once

#include "actors/protocol.hpp"

namespace sao::actors {

// How long one actor may take to describe itself before it is reported
// unresponsive (a learner step is ~0.2 s on the default model).
constexpr auto kStatusTimeout = std::chrono::seconds(3);

// Learner ranks 1..N-1 are processes outside the actor system (they follow
// rank 0 over c10d, algo/learner_ranks.hpp). The learner's status carries
// "ranks" and each rank's share of the last step (rank<r>_tokens,
// _compute_s, _allreduce_s); this appends one "learner-rank-<r>" entry per
// follower with those numbers (tokens, compute_s, allreduce_s).
void add_learner_ranks(std::vector<msg::ActorStatus>& statuses);

IntrospectionActor spawn_introspection_actor(caf::actor_system& system, CoordinatorActor coordinator);

}  // namespace sao::actors
