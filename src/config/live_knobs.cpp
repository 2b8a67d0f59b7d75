// Live knobs; see live_knobs.hpp.
#include "config/live_knobs.hpp"

#include "config/run_config.hpp"

#include "base/error.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace sao::config {

const std::vector<std::pair<std::string, std::string>>& live_knobs() {
  static const std::vector<std::pair<std::string, std::string>> knobs = {
      {"max_staleness", "drop trajectories staler than this many policy versions (-1: never)"},
      {"min_batch", "trajectories the learner waits for before a step"},
      {"max_batch", "trajectories per learner step at most"},
      {"actor_lr", "policy learning rate"},
      {"critic_lr", "value-model learning rate"},
  };
  return knobs;
}

namespace {
std::string known_list() {
  std::string names;
  for (const auto& knob : live_knobs()) names += (names.empty() ? "" : ", ") + knob.first;
  return names;
}
}  // namespace

KnobChange parse_knob_change(const std::string& key, const std::string& text) {
  bool known = false;
  for (const auto& knob : live_knobs()) known = known || knob.first == key;
  if (!known) throw Error("set " + key + ": not a live knob (live knobs: " + known_list() + ")");
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end == nullptr || *end != '\0' || errno == ERANGE || !std::isfinite(value)) {
    throw Error("set " + key + ": '" + text + "' is not a finite number");
  }
  KnobChange change{key, value, false, false};
  if (key == "actor_lr" || key == "critic_lr") {
    if (!algo::kLearningRateRange.contains(value)) {
      throw Error("set " + key + ": must be in " + algo::kLearningRateRange.text() + ", got " + text);
    }
    change.for_learner = true;
    return change;
  }
  // The config's ranges: checked before the value becomes an integer, so
  // 1e308 is refused rather than converted.
  const auto& range = key == "max_staleness" ? kStalenessRange : kBatchRange;
  if (value != std::floor(value) || value < static_cast<double>(range.low) || value > static_cast<double>(range.high)) {
    throw Error("set " + key + ": must be an integer in " + range.text() + ", got " + text);
  }
  change.for_replay = true;  // replay is the one owner of admission and batching
  return change;
}

void apply_knob(replay::ReplayConfig& config, const KnobChange& change) {
  if (!change.for_replay) return;
  replay::ReplayConfig changed = config;
  const auto value = static_cast<int64_t>(change.value);
  if (change.key == "max_staleness") {
    changed.max_staleness = value;
  } else if (change.key == "min_batch") {
    changed.min_batch = value;
  } else if (change.key == "max_batch") {
    changed.max_batch = value;
  } else {
    throw Error("set " + change.key + ": not a replay knob");
  }
  changed.validate("set " + change.key + ": replay");
  config = changed;
}

}  // namespace sao::config
