// The one episode state machine: episodes decoded together by one decode
// engine (continuous batching over a paged KV cache), turn after turn,
// against environments the caller drives. Rows come and go one at a time:
// a row opens, waits for its reset, generates, waits for each step, and
// ends finished or lost; the caller closes it and opens the next, so one
// slow or long episode never holds the others. The rollout actor
// (asynchronous env replies, weight switches between decode steps) and the
// held-out evaluation (synchronous env calls) both run episodes through this
// class, so what an episode is - its prompt, when it ends, whether it
// succeeded, its accuracy - is defined once:
//
//   prompt  = [BOS] + tokens of the reset observation (an empty observation
//             becomes the tokenizer's <|obs|> token), or the chat template's
//             first user turn with the reset's tools;
//   a turn  = generate until a stop token or the turn budget, hand the
//             decoded text (stop token and special tokens removed) to
//             env.step, append the next observation (empty -> <|obs|>; a
//             chat template's user or tool turn, by info "role");
//   the end = the env says terminated or truncated, the episode used
//             max_turns turns, or the model's context is full;
//   success = episode_succeeded(final step) (below);
//   accuracy of the episode = info "accuracy" of the final step if present,
//             else 1/0 from its "success", else undefined (NaN).
// A reset that already ends the episode, an env error or a trajectory that
// does not validate makes the episode lost, with a reason.
//
// The class never calls an environment: the caller sends reset/step to
// wherever its environments live and feeds the answers back.
#pragma once

#include "algo/trajectory.hpp"
#include "model/decode_engine.hpp"
#include "model/generation.hpp"
#include "model/transformer.hpp"
#include "tokenizer/tokenizer.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sao::rollout {

// What an environment answered to a reset or a step, with the signals the
// runtime reads out of its free-form info, as typed fields. This is what
// travels between the env actor and the rollout actor.
struct EnvOutcome {
  std::string observation;
  double reward = 0.0;
  bool terminated = false;
  bool truncated = false;
  double accuracy = std::numeric_limits<double>::quiet_NaN();      // info "accuracy"; NaN when absent
  int8_t success = -1;                                             // info "success": 1 / 0; -1 when absent
  double regime_index = std::numeric_limits<double>::quiet_NaN();  // info "regime_index" (drifting envs)
  std::string reason;  // info "reason" (a verifier's explanation), at most 200 bytes
  // info "role": who speaks the observation, "user" or "tool" ("" when
  // absent: user; a non-string arrives as its JSON text, which the episode
  // refuses by name).
  std::string role;
  // info "tools" at reset, as JSON text ("" when absent): the tool schemas a
  // chat template shows the policy (Tokenizer::first_turn).
  std::string tools;
  // info "counts": tallies the environment reports for the episode's final
  // step ({"worked": 1}); held-out evaluation sums each over its episodes.
  // Finite numbers only, at most kMaxCounts names of at most 64 bytes; other
  // entries count as absent.
  std::map<std::string, double> counts;
  // Set by the agent endpoint (agent/), whose callers speak in chat
  // messages: the observation as messages (system, user, tool), rendered
  // by the tokenizer's *_turn_messages instead of `observation` (empty for
  // environments); the new-token budget of the turn this answer starts (0:
  // rollout.max_new_tokens, and never more than it); held_out: the episode
  // is scored for held-out accuracy and never trained on.
  std::vector<tokenizer::ChatTurnMessage> messages;
  int64_t max_new_tokens = 0;
  bool held_out = false;
  // On a final step from the agent endpoint: one reward per turn of the
  // episode, replacing the rewards its steps carried ("rewards" in the
  // agent's reward call); empty: `reward` falls on the last turn as usual.
  std::vector<double> turn_rewards;

  bool done() const { return terminated || truncated; }
};
constexpr size_t kMaxCounts = 32;

// Reads an environment step's info (anything that is not an object, or a
// field of the wrong type, counts as absent).
EnvOutcome outcome_of(std::string observation, double reward, bool terminated, bool truncated,
                      const nlohmann::json& info);

// Success of a final step: "success" when the env reports it (true / non-zero),
// else "accuracy" >= 1, else terminated with a positive reward.
bool episode_succeeded(const EnvOutcome& final_step);
// The accuracy an episode reports (rule at the top of this file).
double episode_accuracy(const EnvOutcome& final_step);

struct EpisodeSettings {
  model::SamplingConfig sampling;  // stop_tokens: the tokenizer's EOS is added if missing
  int64_t max_turns = 1;           // >= 1
  bool keep_transcripts = false;   // evaluation samples: "obs | action -> obs | ... => success"
};

enum class RowState { kWaitingReset, kGenerating, kWaitingEnv, kFinished, kLost };

struct EpisodeRow {
  RowState state = RowState::kWaitingReset;
  std::vector<int64_t> prompt;
  std::vector<algo::Turn> turns;  // completed turns
  algo::Turn current;             // the turn being generated or waiting for the env
  double reward_sum = 0.0;
  bool terminated = false;  // of the final step (false: truncated, out of turns or context)
  bool success = false;
  double accuracy = std::numeric_limits<double>::quiet_NaN();
  double regime_index = std::numeric_limits<double>::quiet_NaN();
  std::map<std::string, double> counts;  // the final step's info "counts"
  std::string lost_reason;
  bool env_error = false;     // lost because the environment failed (threw, timed out, crashed)
  bool ended_by_env = false;  // finished on a step the environment said was the last
  bool held_out = false;      // finished as a held-out episode: scored, never trained on (EnvOutcome::held_out)
  std::string transcript;
  model::SequenceId sequence = -1;  // in the decode engine while generating or waiting for the env; -1 after
};

// A row whose turn just ended: send `action_text` to its environment's step.
struct TurnEnd {
  size_t row = 0;
  std::string action_text;
  bool closed = false;  // the turn ended on a stop id (false: cut at its token budget or the context)
};

class EpisodeEngine {
 public:
  // `model` sizes the context; `limits` the engine's KV pool; `seed` its sampler.
  EpisodeEngine(const tokenizer::Tokenizer& tokenizer, EpisodeSettings settings, const model::ModelConfig& model,
                model::EngineLimits limits, uint64_t seed);

  // A new row waiting for its reset; its id stays valid until close().
  size_t open();
  // Forgets a row (its blocks, if any, go back to the pool).
  void close(size_t index);
  size_t open_rows() const { return rows_.size(); }
  bool contains(size_t index) const { return rows_.count(index) > 0; }
  std::vector<size_t> row_ids() const;
  const EpisodeRow& row(size_t index) const;

  // The answer to a row's reset: the row's prompt joins the engine at once.
  void reset_done(size_t index, const EnvOutcome& first);
  void reset_failed(size_t index, const std::string& reason);
  bool resets_pending() const;

  // A row is mid-turn: generating, or queued in the engine for its turn.
  bool any_generating() const;
  // The engine has something to run now (see DecodeEngine::has_work).
  bool has_decode_work() const { return engine_.has_work(); }
  // One engine step with weights of `version`; returns the rows whose turn
  // ended (their state is now kWaitingEnv).
  std::vector<TurnEnd> decode_step(model::CausalLM& policy, int64_t version);
  // Tokens the last decode_step sampled.
  int64_t tokens_last_step() const { return engine_.tokens_last_step(); }

  // The environment's answer to a row's action: the row finishes or
  // continues with the observation.
  void step_done(size_t index, const EnvOutcome& outcome);
  void step_failed(size_t index, const std::string& reason);

  // Every open row finished or lost.
  bool finished() const;
  // Longest episode among the open rows, in turns (the current one included).
  int64_t current_turn() const;

  // The trajectory of a finished row (prompt + turns, the per-turn rewards
  // on each turn's last action token). Throws sao::Error if it does not
  // validate; the caller then counts the episode as lost.
  algo::Trajectory trajectory(size_t index, int64_t group_id) const;

  model::DecodeEngine& engine() { return engine_; }
  const model::DecodeEngine& engine() const { return engine_; }

 private:
  EpisodeRow& at(size_t index);
  void lose(EpisodeRow& row, const std::string& reason);
  // Ends a row on its final step; `cut_short`: the env wanted another turn
  // but the context had no room for it.
  void finish_row(EpisodeRow& row, const EnvOutcome& outcome, bool cut_short);
  void release_sequence(EpisodeRow& row);
  // The turn budget an answer asks for, capped by the run's.
  int64_t turn_budget(const EnvOutcome& outcome) const;

  const tokenizer::Tokenizer& tokenizer_;
  EpisodeSettings settings_;
  int64_t max_positions_;
  model::DecodeEngine engine_;
  std::map<size_t, EpisodeRow> rows_;
  std::map<model::SequenceId, size_t> row_of_sequence_;
  size_t next_row_ = 0;
};

}  // namespace sao::rollout
