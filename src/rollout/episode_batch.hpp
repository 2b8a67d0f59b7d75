// The one episode state machine: a batch of episodes decoded together, turn
// after turn, against environments the caller drives. The rollout actor
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
#include "model/generation.hpp"
#include "model/transformer.hpp"
#include "tokenizer/tokenizer.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
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

  bool done() const { return terminated || truncated; }
};

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
  std::string lost_reason;
  bool env_error = false;  // lost because the environment failed (threw, timed out, crashed)
  std::string transcript;
  size_t session_row = 0;  // index inside the decode session
};

// A row whose turn just ended: send `action_text` to its environment's step.
struct TurnEnd {
  size_t row = 0;
  std::string action_text;
};

class EpisodeBatch {
 public:
  EpisodeBatch(const tokenizer::Tokenizer& tokenizer, EpisodeSettings settings, size_t rows);

  size_t size() const { return rows_.size(); }
  const EpisodeRow& row(size_t index) const { return rows_.at(index); }

  // Answers to the resets, in any order. Decoding starts once none is pending.
  void reset_done(size_t index, const EnvOutcome& first);
  void reset_failed(size_t index, const std::string& reason);
  bool resets_pending() const;

  // Builds the decode session over the rows still playing, for a model
  // whose context holds `max_positions` tokens; a row whose prompt leaves no
  // room to reply is lost, naming the sizes. False (and no session) when
  // every row is already finished or lost.
  bool start(uint64_t seed, int64_t max_positions);
  bool started() const { return session_ != nullptr; }
  bool any_generating() const;
  // One decode step of every generating row with weights of `version`;
  // returns the rows whose turn ended (their state is now kWaitingEnv).
  std::vector<TurnEnd> decode_step(model::CausalLM& policy, int64_t version);
  // Generating rows the last decode_step advanced (tokens it produced).
  int64_t tokens_last_step() const { return tokens_last_step_; }

  // The environment's answer to a row's action: the row finishes or
  // continues with the observation.
  void step_done(size_t index, const EnvOutcome& outcome);
  void step_failed(size_t index, const std::string& reason);

  // Every row finished or lost.
  bool finished() const;
  // Longest episode so far, in turns (the current one included).
  int64_t current_turn() const;

  // The trajectory of a finished row (prompt + turns, the per-turn rewards
  // on each turn's last action token). Throws sao::Error if it does not
  // validate; the caller then counts the episode as lost.
  algo::Trajectory trajectory(size_t index, int64_t group_id) const;

 private:
  void lose(EpisodeRow& row, const std::string& reason);
  // Ends a row on its final step; `cut_short`: the env wanted another turn
  // but the context had no room for it.
  void finish_row(EpisodeRow& row, const EnvOutcome& outcome, bool cut_short);
  // Positions the row's tokens take in the model's context so far.
  int64_t positions_used(const EpisodeRow& row) const;

  const tokenizer::Tokenizer& tokenizer_;
  EpisodeSettings settings_;
  std::vector<EpisodeRow> rows_;
  std::unique_ptr<model::DecodeSession> session_;
  int64_t tokens_last_step_ = 0;
  int64_t max_positions_ = 0;  // the model's context, from start()
};

}  // namespace sao::rollout
