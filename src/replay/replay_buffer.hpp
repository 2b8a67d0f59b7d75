// The replay queue between rollouts and the learner, as explicit policy:
// staleness admission, group assembly (GRPO), min/max batch, and a capacity
// that gives rollouts back-pressure. The replay actor is a thin shell around
// this class; everything here is testable without an actor system.
//
// Staleness of a trajectory = learner policy version - the OLDEST policy
// version among its action tokens. It is checked when a trajectory arrives
// and again when a batch is handed out (the learner may have moved on while
// it waited); a trajectory staler than max_staleness is dropped and counted.
// This class is the one owner of staleness admission: the learner only
// checks that no token is newer than itself.
#pragma once

#include "algo/trajectory.hpp"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

namespace sao::replay {

struct ReplayConfig {
  int64_t min_batch = 1;      // SAO: step as soon as one trajectory waits
  int64_t max_batch = 64;     // trajectories per learner step at most
  int64_t max_staleness = 4;  // -1: never drop
  int64_t capacity = 64;      // rollouts pause while this many wait
  int64_t group_size = 1;     // > 1: trajectories enter the queue as complete groups (GRPO)
  bool synchronous = false;   // batch barrier: hand out exactly max_batch, all of one version
  void validate(const std::string& where) const;
};

struct ReplayStats {
  int64_t received = 0;
  int64_t admitted = 0;
  int64_t dropped_stale = 0;
  int64_t handed_out = 0;
  std::map<int64_t, int64_t> staleness_histogram;  // staleness at hand-out -> trajectories
};

class ReplayBuffer {
 public:
  explicit ReplayBuffer(ReplayConfig config);

  // Returns false if the trajectory was dropped as stale. Trajectories are
  // stored and handed out as they came (moved, never rewrapped).
  bool add(algo::Trajectory trajectory, int64_t learner_version);
  // A batch for the learner, or empty if the policy says wait. Re-checks staleness.
  std::vector<algo::Trajectory> take_batch(int64_t learner_version);
  bool ready(int64_t learner_version) const;

  int64_t queued() const;           // trajectories waiting in complete groups
  int64_t pending_partial() const;  // trajectories in incomplete groups
  bool full() const { return queued() + pending_partial() >= config_.capacity; }
  // Trajectories the buffer takes before it is full.
  int64_t room() const { return std::max<int64_t>(0, config_.capacity - queued() - pending_partial()); }
  const ReplayStats& stats() const { return stats_; }
  ReplayConfig& config() { return config_; }
  // Staleness of a trajectory for a learner at `learner_version`.
  static int64_t staleness(const algo::Trajectory& trajectory, int64_t learner_version);

 private:
  bool is_stale(const algo::Trajectory& trajectory, int64_t learner_version) const;
  void drop_stale_groups(int64_t learner_version);

  ReplayConfig config_;
  std::deque<std::vector<algo::Trajectory>> groups_;          // complete groups, oldest first
  std::map<int64_t, std::vector<algo::Trajectory>> partial_;  // group id -> members so far
  ReplayStats stats_;
};

}  // namespace sao::replay
