// The episode state machine; see episode_batch.hpp.
#include "rollout/episode_batch.hpp"

#include "base/utf8.hpp"

#include "base/error.hpp"
#include "base/json_parse.hpp"
#include "tokenizer/load_tokenizer.hpp"

#include <algorithm>
#include <cmath>

namespace sao::rollout {

EnvOutcome outcome_of(std::string observation, double reward, bool terminated, bool truncated,
                      const nlohmann::json& info) {
  EnvOutcome outcome;
  outcome.observation = std::move(observation);
  outcome.reward = reward;
  outcome.terminated = terminated;
  outcome.truncated = truncated;
  if (!info.is_object()) return outcome;
  if (const auto it = info.find("accuracy"); it != info.end() && it->is_number()) {
    outcome.accuracy = it->get<double>();
  }
  if (const auto it = info.find("success"); it != info.end()) {
    if (it->is_boolean()) outcome.success = it->get<bool>() ? 1 : 0;
    if (it->is_number()) outcome.success = it->get<double>() != 0.0 ? 1 : 0;
  }
  if (const auto it = info.find("regime_index"); it != info.end() && it->is_number()) {
    outcome.regime_index = it->get<double>();
  }
  if (const auto it = info.find("reason"); it != info.end() && it->is_string()) {
    outcome.reason = base::truncate_utf8(it->get<std::string>(), 200);
  }
  if (const auto it = info.find("role"); it != info.end()) {
    outcome.role = it->is_string() ? it->get<std::string>() : base::dump_json(*it);
  }
  if (const auto it = info.find("tools"); it != info.end()) outcome.tools = base::dump_json(*it);
  return outcome;
}

bool episode_succeeded(const EnvOutcome& final_step) {
  if (final_step.success >= 0) return final_step.success == 1;
  if (!std::isnan(final_step.accuracy)) return final_step.accuracy >= 1.0 - 1e-9;
  return final_step.terminated && final_step.reward > 0.0;
}

double episode_accuracy(const EnvOutcome& final_step) {
  if (!std::isnan(final_step.accuracy)) return final_step.accuracy;
  if (final_step.success >= 0) return final_step.success == 1 ? 1.0 : 0.0;
  return std::numeric_limits<double>::quiet_NaN();
}

EpisodeBatch::EpisodeBatch(const tokenizer::Tokenizer& tokenizer, EpisodeSettings settings, size_t rows)
    : tokenizer_(tokenizer), settings_(std::move(settings)), rows_(rows) {
  if (settings_.max_turns < 1) throw Error("episode batch: max_turns must be >= 1");
  auto& stops = settings_.sampling.stop_tokens;
  for (const auto id : tokenizer_.stop_ids())
    if (std::find(stops.begin(), stops.end(), id) == stops.end()) stops.push_back(id);
}

void EpisodeBatch::lose(EpisodeRow& row, const std::string& reason) {
  if (row.state == RowState::kFinished || row.state == RowState::kLost) return;
  row.state = RowState::kLost;
  row.lost_reason = reason;
  if (settings_.keep_transcripts) row.transcript += " => lost: " + reason;
}

void EpisodeBatch::reset_done(size_t index, const EnvOutcome& first) {
  auto& row = rows_.at(index);
  if (row.state != RowState::kWaitingReset) return;
  if (first.done()) {
    lose(row, "the environment ended the episode at reset");
    return;
  }
  try {
    row.prompt = tokenizer_.first_turn(first.observation, first.tools);
  } catch (const std::exception& error) {
    lose(row, error.what());
    return;
  }
  if (settings_.keep_transcripts) row.transcript = first.observation;
  row.regime_index = first.regime_index;
  row.state = RowState::kGenerating;
}

void EpisodeBatch::reset_failed(size_t index, const std::string& reason) {
  auto& row = rows_.at(index);
  if (row.state != RowState::kWaitingReset) return;
  row.env_error = true;
  lose(row, "reset: " + reason);
}

bool EpisodeBatch::resets_pending() const {
  return std::any_of(rows_.begin(), rows_.end(),
                     [](const EpisodeRow& row) { return row.state == RowState::kWaitingReset; });
}

bool EpisodeBatch::start(uint64_t seed, int64_t max_positions) {
  if (resets_pending()) throw Error("episode batch: start() before every reset was answered");
  if (max_positions < 1) throw Error("episode batch: max_positions must be >= 1");
  max_positions_ = max_positions;
  std::vector<std::vector<int64_t>> prompts;
  for (auto& row : rows_) {
    if (row.state != RowState::kGenerating) continue;
    // The prompt and one token of reply must fit the context.
    if (static_cast<int64_t>(row.prompt.size()) + 1 > max_positions) {
      lose(row, "the prompt takes " + std::to_string(row.prompt.size()) +
                    " tokens and leaves no room to reply in the model's context of " + std::to_string(max_positions) +
                    " (model.max_position_embeddings)");
      continue;
    }
    row.session_row = prompts.size();
    prompts.push_back(row.prompt);
  }
  if (prompts.empty()) return false;
  session_ = std::make_unique<model::DecodeSession>(std::move(prompts), settings_.sampling, seed);
  return true;
}

bool EpisodeBatch::any_generating() const {
  return std::any_of(rows_.begin(), rows_.end(),
                     [](const EpisodeRow& row) { return row.state == RowState::kGenerating; });
}

std::vector<TurnEnd> EpisodeBatch::decode_step(model::CausalLM& policy, int64_t version) {
  std::vector<TurnEnd> ended;
  tokens_last_step_ = 0;
  if (!session_ || !any_generating()) return ended;
  if (policy->config().max_position_embeddings != max_positions_) {
    throw Error("episode batch: started for a context of " + std::to_string(max_positions_) +
                " positions, decoding with a model of " + std::to_string(policy->config().max_position_embeddings));
  }
  session_->step(policy, version);
  for (size_t index = 0; index < rows_.size(); ++index) {
    auto& row = rows_[index];
    if (row.state != RowState::kGenerating) continue;
    ++tokens_last_step_;
    const auto& sequence = session_->sequence(row.session_row);
    if (sequence.finish == model::FinishReason::kRunning) continue;
    const auto begin = static_cast<std::ptrdiff_t>(sequence.turn_start);
    row.current.action_tokens.assign(sequence.tokens.begin() + begin, sequence.tokens.end());
    row.current.logprobs.assign(sequence.logprobs.begin() + begin, sequence.logprobs.end());
    row.current.versions.assign(sequence.versions.begin() + begin, sequence.versions.end());
    std::vector<int64_t> answer(row.current.action_tokens);
    const auto& stops = settings_.sampling.stop_tokens;
    answer.erase(std::find_first_of(answer.begin(), answer.end(), stops.begin(), stops.end()), answer.end());
    std::string text = tokenizer::decode_generated(tokenizer_, answer);
    if (settings_.keep_transcripts) row.transcript += " | " + text;
    row.state = RowState::kWaitingEnv;
    ended.push_back({index, std::move(text)});
  }
  return ended;
}

void EpisodeBatch::step_done(size_t index, const EnvOutcome& outcome) {
  auto& row = rows_.at(index);
  if (row.state != RowState::kWaitingEnv) return;
  const auto& sequence = session_->sequence(row.session_row);
  const bool context_full = sequence.finish == model::FinishReason::kContextFull;
  row.current.reward = outcome.reward;
  row.reward_sum += outcome.reward;
  if (!std::isnan(outcome.regime_index)) row.regime_index = outcome.regime_index;
  const bool out_of_turns = static_cast<int64_t>(row.turns.size()) + 1 >= settings_.max_turns;
  if (outcome.done() || out_of_turns || context_full) {
    finish_row(row, outcome, /*cut_short=*/false);
    return;
  }
  try {
    const auto closer = tokenizer_.action_end();
    const auto& action = row.current.action_tokens;
    const bool closed = !action.empty() && std::find(closer.begin(), closer.end(), action.back()) != closer.end();
    const auto speaker = outcome.role.empty() ? tokenizer::Speaker::kUser
                                              : tokenizer::speaker_of(outcome.role, "the environment's info.role");
    row.current.observation = tokenizer_.next_turn(outcome.observation, speaker, closed);
  } catch (const std::exception& error) {
    lose(row, error.what());
    return;
  }
  // The next turn needs its observation and at least one generated token
  // inside the model's context; when they do not fit, the context is full
  // and the episode ends here, as a truncation.
  if (positions_used(row) + static_cast<int64_t>(row.current.observation.size()) + 1 > max_positions_) {
    row.current.observation.clear();
    finish_row(row, outcome, /*cut_short=*/true);
    return;
  }
  if (settings_.keep_transcripts) row.transcript += " -> " + outcome.observation;
  const auto observation = row.current.observation;
  row.turns.push_back(std::move(row.current));
  row.current = algo::Turn{};
  session_->continue_row(row.session_row, observation, settings_.sampling.max_new_tokens);
  row.state = RowState::kGenerating;
}

int64_t EpisodeBatch::positions_used(const EpisodeRow& row) const {
  auto used = static_cast<int64_t>(row.prompt.size());
  for (const auto& turn : row.turns) used += static_cast<int64_t>(turn.action_tokens.size() + turn.observation.size());
  return used + static_cast<int64_t>(row.current.action_tokens.size());
}

void EpisodeBatch::finish_row(EpisodeRow& row, const EnvOutcome& outcome, bool cut_short) {
  row.turns.push_back(std::move(row.current));
  row.current = algo::Turn{};
  row.terminated = outcome.terminated;
  // An episode cut by the turn limit or the context did not succeed, whatever its last step said.
  row.success = outcome.done() && episode_succeeded(outcome);
  row.accuracy = episode_accuracy(outcome);
  row.state = RowState::kFinished;
  if (settings_.keep_transcripts) {
    row.transcript += row.success ? " => success" : " => failure";
    if (!outcome.reason.empty()) row.transcript += " (" + outcome.reason + ")";
    if (cut_short) row.transcript += " (context full)";
  }
}

void EpisodeBatch::step_failed(size_t index, const std::string& reason) {
  auto& row = rows_.at(index);
  if (row.state != RowState::kWaitingEnv) return;
  row.env_error = true;
  lose(row, "step: " + reason);
}

bool EpisodeBatch::finished() const {
  return std::all_of(rows_.begin(), rows_.end(), [](const EpisodeRow& row) {
    return row.state == RowState::kFinished || row.state == RowState::kLost;
  });
}

int64_t EpisodeBatch::current_turn() const {
  int64_t turn = 0;
  for (const auto& row : rows_) turn = std::max<int64_t>(turn, static_cast<int64_t>(row.turns.size()) + 1);
  return turn;
}

algo::Trajectory EpisodeBatch::trajectory(size_t index, int64_t group_id) const {
  const auto& row = rows_.at(index);
  if (row.state != RowState::kFinished) throw Error("episode batch: row " + std::to_string(index) + " is not finished");
  auto trajectory = algo::make_trajectory(row.prompt, row.turns, /*outcome_reward=*/0.0, row.terminated, group_id);
  trajectory.accuracy = row.accuracy;
  return trajectory;
}

}  // namespace sao::rollout
