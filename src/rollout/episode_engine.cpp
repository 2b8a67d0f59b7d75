// The episode state machine; see episode_engine.hpp.
#include "rollout/episode_engine.hpp"

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
  if (const auto it = info.find("counts"); it != info.end() && it->is_object()) {
    for (const auto& [name, value] : it->items()) {
      if (outcome.counts.size() == kMaxCounts) break;
      if (name.size() > 64 || !value.is_number()) continue;
      const auto number = value.get<double>();
      if (std::isfinite(number)) outcome.counts[name] = number;
    }
  }
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

namespace {
// The settings with the tokenizer's stop ids added to the sampling's.
EpisodeSettings with_stop_ids(EpisodeSettings settings, const tokenizer::Tokenizer& tokenizer) {
  if (settings.max_turns < 1) throw Error("episode engine: max_turns must be >= 1");
  auto& stops = settings.sampling.stop_tokens;
  for (const auto id : tokenizer.stop_ids())
    if (std::find(stops.begin(), stops.end(), id) == stops.end()) stops.push_back(id);
  return settings;
}
}  // namespace

EpisodeEngine::EpisodeEngine(const tokenizer::Tokenizer& tokenizer, EpisodeSettings settings,
                             const model::ModelConfig& model, model::EngineLimits limits, uint64_t seed)
    : tokenizer_(tokenizer),
      settings_(with_stop_ids(std::move(settings), tokenizer)),
      max_positions_(model.max_position_embeddings),
      engine_(model, settings_.sampling, limits, seed) {}

size_t EpisodeEngine::open() {
  const size_t index = next_row_++;
  rows_.emplace(index, EpisodeRow{});
  return index;
}

void EpisodeEngine::close(size_t index) {
  auto& row = at(index);
  release_sequence(row);
  rows_.erase(index);
}

std::vector<size_t> EpisodeEngine::row_ids() const {
  std::vector<size_t> ids;
  ids.reserve(rows_.size());
  for (const auto& item : rows_) ids.push_back(item.first);
  return ids;
}

const EpisodeRow& EpisodeEngine::row(size_t index) const {
  const auto it = rows_.find(index);
  if (it == rows_.end()) throw Error("episode engine: no open row " + std::to_string(index));
  return it->second;
}

EpisodeRow& EpisodeEngine::at(size_t index) {
  const auto it = rows_.find(index);
  if (it == rows_.end()) throw Error("episode engine: no open row " + std::to_string(index));
  return it->second;
}

void EpisodeEngine::release_sequence(EpisodeRow& row) {
  if (row.sequence < 0) return;
  row_of_sequence_.erase(row.sequence);
  engine_.release(row.sequence);
  row.sequence = -1;
}

void EpisodeEngine::lose(EpisodeRow& row, const std::string& reason) {
  if (row.state == RowState::kFinished || row.state == RowState::kLost) return;
  // A lost episode's blocks go back to the pool at once.
  release_sequence(row);
  row.state = RowState::kLost;
  row.lost_reason = reason;
  if (settings_.keep_transcripts) row.transcript += " => lost: " + reason;
}

void EpisodeEngine::reset_done(size_t index, const EnvOutcome& first) {
  auto& row = at(index);
  if (row.state != RowState::kWaitingReset) return;
  if (first.done()) {
    lose(row, "the environment ended the episode at reset");
    return;
  }
  try {
    row.prompt = first.messages.empty()
                     ? tokenizer_.first_turn(first.observation, first.tools)
                     : tokenizer_.first_turn_messages(first.messages, first.tools, "the agent's first messages");
    // Refused when the prompt leaves no room to reply in the model's
    // context, or its turn is larger than the whole KV pool.
    row.sequence = engine_.add(row.prompt, turn_budget(first));
  } catch (const std::exception& error) {
    lose(row, error.what());
    return;
  }
  row_of_sequence_[row.sequence] = index;
  if (settings_.keep_transcripts) row.transcript = first.observation;
  row.regime_index = first.regime_index;
  row.state = RowState::kGenerating;
}

void EpisodeEngine::reset_failed(size_t index, const std::string& reason) {
  auto& row = at(index);
  if (row.state != RowState::kWaitingReset) return;
  row.env_error = true;
  lose(row, "reset: " + reason);
}

bool EpisodeEngine::resets_pending() const {
  return std::any_of(rows_.begin(), rows_.end(),
                     [](const auto& item) { return item.second.state == RowState::kWaitingReset; });
}

bool EpisodeEngine::any_generating() const {
  return std::any_of(rows_.begin(), rows_.end(),
                     [](const auto& item) { return item.second.state == RowState::kGenerating; });
}

std::vector<TurnEnd> EpisodeEngine::decode_step(model::CausalLM& policy, int64_t version) {
  std::vector<TurnEnd> ended;
  for (const auto id : engine_.step(policy, version)) {
    const size_t index = row_of_sequence_.at(id);
    auto& row = rows_.at(index);
    const auto& sequence = engine_.sequence(id);
    const auto begin = static_cast<std::ptrdiff_t>(sequence.turn_start);
    row.current.action_tokens.assign(sequence.tokens.begin() + begin, sequence.tokens.end());
    row.current.logprobs.assign(sequence.logprobs.begin() + begin, sequence.logprobs.end());
    row.current.versions.assign(sequence.versions.begin() + begin, sequence.versions.end());
    std::vector<int64_t> answer(row.current.action_tokens);
    const auto& stops = settings_.sampling.stop_tokens;
    const auto stop = std::find_first_of(answer.begin(), answer.end(), stops.begin(), stops.end());
    const bool closed = stop != answer.end();
    answer.erase(stop, answer.end());
    std::string text = tokenizer::decode_generated(tokenizer_, answer);
    if (settings_.keep_transcripts) row.transcript += " | " + text;
    row.state = RowState::kWaitingEnv;
    ended.push_back({index, std::move(text), closed});
  }
  return ended;
}

void EpisodeEngine::step_done(size_t index, const EnvOutcome& outcome) {
  auto& row = at(index);
  if (row.state != RowState::kWaitingEnv) return;
  const bool context_full = engine_.sequence(row.sequence).finish == model::FinishReason::kContextFull;
  row.current.reward = outcome.reward;
  row.reward_sum += outcome.reward;
  if (!std::isnan(outcome.regime_index)) row.regime_index = outcome.regime_index;
  const bool out_of_turns = static_cast<int64_t>(row.turns.size()) + 1 >= settings_.max_turns;
  if (!outcome.turn_rewards.empty()) {
    if (!outcome.done() || outcome.turn_rewards.size() != row.turns.size() + 1) {
      lose(row, "per-turn rewards: " + std::to_string(outcome.turn_rewards.size()) + " for an episode of " +
                    std::to_string(row.turns.size() + 1) + " turns" + (outcome.done() ? "" : " that goes on"));
      return;
    }
    for (size_t turn = 0; turn < row.turns.size(); ++turn) row.turns[turn].reward = outcome.turn_rewards[turn];
    row.current.reward = outcome.turn_rewards.back();
    row.reward_sum = 0.0;
    for (const auto reward : outcome.turn_rewards) row.reward_sum += reward;
  }
  if (outcome.done() || out_of_turns || context_full) {
    finish_row(row, outcome, /*cut_short=*/false);
    return;
  }
  try {
    const auto closer = tokenizer_.action_end();
    const auto& action = row.current.action_tokens;
    const bool closed = !action.empty() && std::find(closer.begin(), closer.end(), action.back()) != closer.end();
    if (outcome.messages.empty()) {
      const auto speaker = outcome.role.empty() ? tokenizer::Speaker::kUser
                                                : tokenizer::speaker_of(outcome.role, "the environment's info.role");
      row.current.observation = tokenizer_.next_turn(outcome.observation, speaker, closed);
    } else {
      row.current.observation = tokenizer_.next_turn_messages(outcome.messages, closed, "the agent's new messages");
    }
  } catch (const std::exception& error) {
    lose(row, error.what());
    return;
  }
  // The next turn needs its observation and at least one generated token
  // inside the model's context; when they do not fit, the context is full
  // and the episode ends here, as a truncation.
  const int64_t context = engine_.context_tokens(row.sequence);
  if (context + static_cast<int64_t>(row.current.observation.size()) + 1 > max_positions_) {
    row.current.observation.clear();
    finish_row(row, outcome, /*cut_short=*/true);
    return;
  }
  try {
    engine_.continue_turn(row.sequence, row.current.observation, turn_budget(outcome));
  } catch (const std::exception& error) {
    lose(row, error.what());
    return;
  }
  if (settings_.keep_transcripts) row.transcript += " -> " + outcome.observation;
  row.turns.push_back(std::move(row.current));
  row.current = algo::Turn{};
  row.state = RowState::kGenerating;
}

int64_t EpisodeEngine::turn_budget(const EnvOutcome& outcome) const {
  const auto run = settings_.sampling.max_new_tokens;
  return outcome.max_new_tokens > 0 ? std::min(outcome.max_new_tokens, run) : run;
}

void EpisodeEngine::finish_row(EpisodeRow& row, const EnvOutcome& outcome, bool cut_short) {
  release_sequence(row);
  row.held_out = outcome.held_out;
  row.ended_by_env = outcome.done();
  row.turns.push_back(std::move(row.current));
  row.current = algo::Turn{};
  row.terminated = outcome.terminated;
  // An episode cut by the turn limit or the context did not succeed, whatever its last step said.
  row.success = outcome.done() && episode_succeeded(outcome);
  row.accuracy = episode_accuracy(outcome);
  row.counts = outcome.counts;
  row.state = RowState::kFinished;
  if (settings_.keep_transcripts) {
    row.transcript += row.success ? " => success" : " => failure";
    if (!outcome.reason.empty()) row.transcript += " (" + outcome.reason + ")";
    if (cut_short) row.transcript += " (context full)";
  }
}

void EpisodeEngine::step_failed(size_t index, const std::string& reason) {
  auto& row = at(index);
  if (row.state != RowState::kWaitingEnv) return;
  row.env_error = true;
  lose(row, "step: " + reason);
}

bool EpisodeEngine::finished() const {
  return std::all_of(rows_.begin(), rows_.end(), [](const auto& item) {
    return item.second.state == RowState::kFinished || item.second.state == RowState::kLost;
  });
}

int64_t EpisodeEngine::current_turn() const {
  int64_t turn = 0;
  for (const auto& item : rows_) turn = std::max<int64_t>(turn, static_cast<int64_t>(item.second.turns.size()) + 1);
  return turn;
}

algo::Trajectory EpisodeEngine::trajectory(size_t index, int64_t group_id) const {
  const auto& row = this->row(index);
  if (row.state != RowState::kFinished)
    throw Error("episode engine: row " + std::to_string(index) + " is not finished");
  auto trajectory = algo::make_trajectory(row.prompt, row.turns, /*outcome_reward=*/0.0, row.terminated, group_id);
  trajectory.accuracy = row.accuracy;
  return trajectory;
}

}  // namespace sao::rollout
