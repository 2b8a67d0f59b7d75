// Live knobs; see live_knobs.hpp.
#include "config/live_knobs.hpp"

#include "config/run_config.hpp"

#include "base/error.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace sao::config {

const std::vector<KnobSpec>& knob_table() {
  static const std::vector<KnobSpec> table = {
      {Knob::kMaxStaleness, "max_staleness", KnobOwner::kReplay, true,
       "drop trajectories staler than this many policy versions (-1: never)"},
      {Knob::kMinBatch, "min_batch", KnobOwner::kReplay, true, "trajectories the learner waits for before a step"},
      {Knob::kMaxBatch, "max_batch", KnobOwner::kReplay, true, "trajectories per learner step at most"},
      {Knob::kActorLr, "actor_lr", KnobOwner::kLearner, false, "policy learning rate"},
      {Knob::kCriticLr, "critic_lr", KnobOwner::kLearner, false, "value-model learning rate"},
  };
  return table;
}

const KnobSpec& spec_of(Knob knob) {
  for (const auto& spec : knob_table()) {
    if (spec.knob == knob) return spec;
  }
  throw Error("live knob " + std::to_string(static_cast<int>(knob)) + " has no entry in the knob table");
}

const char* knob_name(Knob knob) {
  return spec_of(knob).name;
}

std::optional<Knob> knob_named(const std::string& name) {
  for (const auto& spec : knob_table()) {
    if (name == spec.name) return spec.knob;
  }
  return std::nullopt;
}

std::optional<Knob> knob_from_value(uint8_t value) {
  for (const auto& spec : knob_table()) {
    if (static_cast<uint8_t>(spec.knob) == value) return spec.knob;
  }
  return std::nullopt;
}

namespace {
std::string known_list() {
  std::string names;
  for (const auto& spec : knob_table()) names += (names.empty() ? "" : ", ") + std::string(spec.name);
  return names;
}

// A count's range from the config's own bounds.
const base::IntRange& count_range(Knob knob) {
  return knob == Knob::kMaxStaleness ? kStalenessRange : kBatchRange;
}
}  // namespace

KnobChange parse_knob_change(const std::string& key, const std::string& text) {
  const auto knob = knob_named(key);
  if (!knob) throw Error("set " + key + ": not a live knob (live knobs: " + known_list() + ")");
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end == nullptr || *end != '\0' || errno == ERANGE || !std::isfinite(value)) {
    throw Error("set " + key + ": '" + text + "' is not a finite number");
  }
  if (!spec_of(*knob).integer) {
    if (!algo::kLearningRateRange.contains(value)) {
      throw Error("set " + key + ": must be in " + algo::kLearningRateRange.text() + ", got " + text);
    }
    return {*knob, value};
  }
  // The config's ranges: checked before the value becomes an integer, so
  // 1e308 is refused rather than converted.
  const auto& range = count_range(*knob);
  if (value != std::floor(value) || value < static_cast<double>(range.low) || value > static_cast<double>(range.high)) {
    throw Error("set " + key + ": must be an integer in " + range.text() + ", got " + text);
  }
  return {*knob, value};
}

void apply_knob(replay::ReplayConfig& config, const KnobChange& change) {
  const auto& spec = spec_of(change.knob);
  const std::string where = std::string("set ") + spec.name;
  if (spec.owner != KnobOwner::kReplay) throw Error(where + ": not a replay knob");
  replay::ReplayConfig changed = config;
  const auto value = static_cast<int64_t>(change.value);
  switch (change.knob) {
    case Knob::kMaxStaleness:
      changed.max_staleness = value;
      break;
    case Knob::kMinBatch:
      changed.min_batch = value;
      break;
    case Knob::kMaxBatch:
      changed.max_batch = value;
      break;
    case Knob::kActorLr:
    case Knob::kCriticLr:
      throw Error(where + ": not a replay knob");
  }
  changed.validate(where + ": replay");
  config = changed;
}

double replay_knob_value(const replay::ReplayConfig& config, Knob knob) {
  switch (knob) {
    case Knob::kMaxStaleness:
      return static_cast<double>(config.max_staleness);
    case Knob::kMinBatch:
      return static_cast<double>(config.min_batch);
    case Knob::kMaxBatch:
      return static_cast<double>(config.max_batch);
    case Knob::kActorLr:
    case Knob::kCriticLr:
      break;
  }
  throw Error(std::string("live knob ") + knob_name(knob) + " is not the replay's");
}

}  // namespace sao::config
