// Replay policy without actors: staleness admission (on arrival and again at
// hand-out), min/max batch, GRPO group assembly, the synchronous barrier and
// the capacity that gives rollouts back-pressure.
#include "replay/replay_buffer.hpp"
#include "base/error.hpp"

#include <doctest/doctest.h>

using sao::replay::ReplayBuffer;
using sao::replay::ReplayConfig;

namespace {
sao::algo::Trajectory item(int64_t oldest_version, int64_t newest_version, int64_t group_id = 0) {
  sao::algo::Trajectory result;
  auto& t = result;
  t.tokens = {1, 2, 3, 4};
  t.action_mask = {0, 0, 1, 1};
  t.behaviour_logprobs = {0, 0, -1, -1};
  t.policy_versions = {-1, -1, oldest_version, newest_version};
  t.rewards = {0, 0, 0, 1};
  t.group_id = group_id;
  return result;
}
}  // namespace

TEST_CASE("staleness is measured from the oldest action token") {
  CHECK(ReplayBuffer::staleness(item(3, 5), 7) == 4);
}

TEST_CASE("a trajectory staler than max_staleness is dropped on arrival and counted") {
  ReplayConfig config;
  config.max_staleness = 2;
  ReplayBuffer buffer(config);
  CHECK_FALSE(buffer.add(item(2, 5), 5));  // staleness 3
  CHECK(buffer.add(item(3, 5), 5));        // staleness 2: admitted
  CHECK(buffer.stats().dropped_stale == 1);
  CHECK(buffer.stats().admitted == 1);
  CHECK(buffer.queued() == 1);
}

TEST_CASE("staleness is checked again when the batch is handed out") {
  ReplayConfig config;
  config.max_staleness = 1;
  config.min_batch = 1;
  ReplayBuffer buffer(config);
  CHECK(buffer.add(item(4, 4), 4));
  CHECK(buffer.add(item(5, 5), 5));
  auto batch = buffer.take_batch(6);  // the first is now 2 versions old
  REQUIRE(batch.size() == 1);
  CHECK(batch[0].oldest_version() == 5);
  CHECK(buffer.stats().dropped_stale == 1);
  CHECK(buffer.stats().staleness_histogram.at(1) == 1);
}

TEST_CASE("min_batch 1 hands out at once; max_batch caps the batch; the queue is FIFO") {
  ReplayConfig config;
  config.min_batch = 1;
  config.max_batch = 2;
  config.capacity = 4;
  config.max_staleness = -1;
  ReplayBuffer buffer(config);
  CHECK_FALSE(buffer.ready(0));
  buffer.add(item(0, 0, 10), 0);
  CHECK(buffer.ready(0));
  buffer.add(item(0, 0, 11), 0);
  buffer.add(item(0, 0, 12), 0);
  auto batch = buffer.take_batch(0);
  REQUIRE(batch.size() == 2);
  CHECK(batch[0].group_id == 10);
  CHECK(batch[1].group_id == 11);
  CHECK(buffer.queued() == 1);
  CHECK_FALSE(buffer.full());
  buffer.add(item(0, 0), 0);
  buffer.add(item(0, 0), 0);
  buffer.add(item(0, 0), 0);
  CHECK(buffer.full());
}

TEST_CASE("GRPO groups enter the queue only when complete and leave whole") {
  ReplayConfig config;
  config.group_size = 2;
  config.min_batch = 2;
  config.max_batch = 4;
  ReplayBuffer buffer(config);
  buffer.add(item(0, 0, 7), 0);
  buffer.add(item(0, 0, 8), 0);
  CHECK(buffer.queued() == 0);
  CHECK(buffer.pending_partial() == 2);
  CHECK(buffer.take_batch(0).empty());
  buffer.add(item(0, 0, 8), 0);
  auto batch = buffer.take_batch(0);
  REQUIRE(batch.size() == 2);
  CHECK(batch[0].group_id == 8);
  CHECK(batch[1].group_id == 8);
  CHECK(buffer.pending_partial() == 1);
}

TEST_CASE("the synchronous barrier hands out exactly max_batch trajectories of one version") {
  ReplayConfig config;
  config.synchronous = true;
  config.min_batch = 3;
  config.max_batch = 3;
  config.max_staleness = 0;
  ReplayBuffer buffer(config);
  buffer.add(item(2, 2), 2);
  buffer.add(item(2, 2), 2);
  CHECK_FALSE(buffer.ready(2));
  buffer.add(item(2, 2), 2);
  auto batch = buffer.take_batch(2);
  REQUIRE(batch.size() == 3);
  for (const auto& entry : batch) CHECK(entry.oldest_version() == 2);
}

TEST_CASE("bad replay configs name the key") {
  ReplayConfig config;
  config.max_batch = 0;
  CHECK_THROWS_WITH(config.validate("replay"), "replay.max_batch: must be >= min_batch");
  config = ReplayConfig{};
  config.capacity = 2;
  CHECK_THROWS_WITH(config.validate("replay"), "replay.capacity: must be >= max_batch");
  config = ReplayConfig{};
  config.group_size = 8;
  config.min_batch = 4;
  CHECK_THROWS_WITH(config.validate("replay"), "replay: min_batch and max_batch must be multiples of group_size (8)");
}
