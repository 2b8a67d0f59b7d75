// Knobs an operator may change while a run goes (console `set`, HTTP
// control): which ones exist, what values they accept, and how a change is
// applied to the replay policy. The learner's share is applied by
// algo::Learner::set_* so the optimisers see it at the next step.
#pragma once

#include "replay/replay_buffer.hpp"

#include <string>
#include <vector>

namespace sao::config {

struct KnobChange {
  std::string key;
  double value = 0.0;
  bool for_replay = false;   // applied to the replay buffer's admission/batching
  bool for_learner = false;  // applied to the learner (learning rates)
};

// The knobs that are safe to change live, with a one-line description each.
const std::vector<std::pair<std::string, std::string>>& live_knobs();

// Parses `key` = `text`; throws sao::Error naming the knob and the rule it
// broke (unknown knob, not a number, not an integer, out of range).
KnobChange parse_knob_change(const std::string& key, const std::string& text);

// Applies a replay-side change, checking it against the rest of the replay
// config (e.g. min_batch <= max_batch, multiples of group_size); throws
// sao::Error and leaves `config` unchanged when the result would be invalid.
void apply_knob(replay::ReplayConfig& config, const KnobChange& change);

}  // namespace sao::config
