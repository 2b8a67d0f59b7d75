// Knobs an operator may change while a run goes (console `set`, HTTP
// control): one table says which exist, their names, which actor owns each,
// the values they accept and what they do. The replay's knobs are applied by
// apply_knob below; the learner's by algo::Learner::set_* so the optimisers
// see them at the next step. Messages carry the Knob, never its name.
#pragma once

#include "replay/replay_buffer.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sao::config {

enum class Knob : uint8_t { kMaxStaleness, kMinBatch, kMaxBatch, kActorLr, kCriticLr };
enum class KnobOwner : uint8_t { kReplay, kLearner };

struct KnobSpec {
  Knob knob;
  const char* name;  // as typed in `set NAME VALUE` and shown in status and metrics
  KnobOwner owner;   // the one actor that applies it
  bool integer;      // the replay's knobs are counts
  const char* description;
};

// Every live knob, in the order the console lists them.
const std::vector<KnobSpec>& knob_table();
const KnobSpec& spec_of(Knob knob);
const char* knob_name(Knob knob);
// A knob named by a peer or a user; nullopt for a name no knob has.
std::optional<Knob> knob_named(const std::string& name);
// A knob number as a peer sent it (untrusted); nullopt for no knob.
std::optional<Knob> knob_from_value(uint8_t value);

struct KnobChange {
  Knob knob = Knob::kMaxStaleness;
  double value = 0.0;
};

// Parses `key` = `text`; throws sao::Error naming the knob and the rule it
// broke (unknown knob, not a number, not an integer, out of range).
KnobChange parse_knob_change(const std::string& key, const std::string& text);

// Applies a replay knob, checking it against the rest of the replay config
// (e.g. min_batch <= max_batch, multiples of group_size); throws sao::Error
// and leaves `config` unchanged when the result would be invalid, or when
// the knob is not the replay's.
void apply_knob(replay::ReplayConfig& config, const KnobChange& change);
// The current value of a replay knob in `config`.
double replay_knob_value(const replay::ReplayConfig& config, Knob knob);

}  // namespace sao::config
