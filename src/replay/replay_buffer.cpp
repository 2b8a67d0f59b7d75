// Replay policy; see replay_buffer.hpp.
#include "replay/replay_buffer.hpp"

#include "base/error.hpp"

#include <algorithm>

namespace sao::replay {

void ReplayConfig::validate(const std::string& where) const {
  if (min_batch < 1) throw Error(where + ".min_batch: must be >= 1");
  if (max_batch < min_batch) throw Error(where + ".max_batch: must be >= min_batch");
  if (max_staleness < -1) throw Error(where + ".max_staleness: must be >= 0, or -1 for no limit");
  if (capacity < max_batch) throw Error(where + ".capacity: must be >= max_batch");
  if (group_size < 1) throw Error(where + ".group_size: must be >= 1");
  if (max_batch % group_size != 0 || min_batch % group_size != 0) {
    throw Error(where + ": min_batch and max_batch must be multiples of group_size (" + std::to_string(group_size) +
                ")");
  }
}

ReplayBuffer::ReplayBuffer(ReplayConfig config) : config_(config) {
  config_.validate("replay");
}

int64_t ReplayBuffer::staleness(const algo::Trajectory& trajectory, int64_t learner_version) {
  return learner_version - trajectory.oldest_version();
}

bool ReplayBuffer::is_stale(const algo::Trajectory& trajectory, int64_t learner_version) const {
  return config_.max_staleness >= 0 && staleness(trajectory, learner_version) > config_.max_staleness;
}

bool ReplayBuffer::add(algo::Trajectory item, int64_t learner_version) {
  ++stats_.received;
  if (is_stale(item, learner_version)) {
    ++stats_.dropped_stale;
    return false;
  }
  ++stats_.admitted;
  if (config_.group_size == 1) {
    groups_.push_back({std::move(item)});
    return true;
  }
  auto& members = partial_[item.group_id];
  members.push_back(std::move(item));
  if (static_cast<int64_t>(members.size()) == config_.group_size) {
    groups_.push_back(std::move(members));
    partial_.erase(groups_.back().front().group_id);
  }
  return true;
}

void ReplayBuffer::drop_stale_groups(int64_t learner_version) {
  // A group is only useful whole (its baseline is the group mean): one stale member drops the group.
  for (auto it = groups_.begin(); it != groups_.end();) {
    const bool stale = std::any_of(it->begin(), it->end(),
                                   [&](const algo::Trajectory& item) { return is_stale(item, learner_version); });
    if (stale) {
      stats_.dropped_stale += static_cast<int64_t>(it->size());
      it = groups_.erase(it);
    } else {
      ++it;
    }
  }
}

int64_t ReplayBuffer::queued() const {
  int64_t count = 0;
  for (const auto& group : groups_) count += static_cast<int64_t>(group.size());
  return count;
}

int64_t ReplayBuffer::pending_partial() const {
  int64_t count = 0;
  for (const auto& item : partial_) count += static_cast<int64_t>(item.second.size());
  return count;
}

bool ReplayBuffer::ready(int64_t learner_version) const {
  const int64_t waiting = queued();
  if (!config_.synchronous) return waiting >= config_.min_batch;
  if (waiting < config_.max_batch) return false;
  // The barrier: a synchronous batch is made of one policy version only.
  const int64_t version = groups_.front().front().oldest_version();
  int64_t same_version = 0;
  for (const auto& group : groups_) {
    for (const auto& item : group) same_version += item.oldest_version() == version ? 1 : 0;
  }
  return same_version >= config_.max_batch;
}

std::vector<algo::Trajectory> ReplayBuffer::take_batch(int64_t learner_version) {
  drop_stale_groups(learner_version);
  std::vector<algo::Trajectory> batch;
  if (!ready(learner_version)) return batch;
  const int64_t batch_version = groups_.front().front().oldest_version();
  for (auto it = groups_.begin(); it != groups_.end() && static_cast<int64_t>(batch.size()) < config_.max_batch;) {
    const bool same_version = std::all_of(it->begin(), it->end(), [&](const algo::Trajectory& item) {
      return item.oldest_version() == batch_version;
    });
    const bool fits = static_cast<int64_t>(batch.size() + it->size()) <= config_.max_batch;
    if (fits && (!config_.synchronous || same_version)) {
      for (auto& item : *it) batch.push_back(std::move(item));
      it = groups_.erase(it);
    } else {
      ++it;
    }
  }
  for (const auto& item : batch) ++stats_.staleness_histogram[staleness(item, learner_version)];
  stats_.handed_out += static_cast<int64_t>(batch.size());
  return batch;
}

}  // namespace sao::replay
