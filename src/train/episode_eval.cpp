// Held-out multi-turn evaluation; see episode_eval.hpp.
#include "train/episode_eval.hpp"

#include "base/error.hpp"
#include "rollout/episode_engine.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>

namespace sao::train {

namespace {
rollout::EnvOutcome outcome(const env::EnvStep& step) {
  return rollout::outcome_of(step.observation, step.reward, step.terminated, step.truncated, step.info);
}
}  // namespace

EpisodeEvalResult evaluate_episodes(model::CausalLM& policy, const tokenizer::Tokenizer& tokenizer,
                                    const EnvironmentMaker& make_environment, const EpisodeEvalOptions& options,
                                    uint64_t seed, EnvironmentPool* pool) {
  if (options.batch_size < 1) throw Error("evaluate_episodes: batch_size must be >= 1");
  const auto start_time = std::chrono::steady_clock::now();
  EnvironmentPool call_pool;
  auto& environments = (pool != nullptr ? pool : &call_pool)->environments;
  if (environments.empty()) environments.push_back(make_environment());
  if (!environments.front()) environments.front() = make_environment();
  const env::Environment& probe = *environments.front();
  const int64_t available = probe.heldout_size();
  if (available <= 0) throw Error("evaluate_episodes: environment '" + probe.name() + "' has no held-out split");
  const int64_t total = options.episodes > 0 ? std::min(options.episodes, available) : available;
  int64_t max_turns = options.max_turns > 0 ? options.max_turns : probe.limits().max_turns;
  if (max_turns <= 0) max_turns = 64;
  env::FailureStreak streak(options.max_failures_in_a_row, probe.name());

  rollout::EpisodeSettings settings;
  settings.sampling.temperature = options.temperature;
  settings.sampling.max_new_tokens = options.max_new_tokens;
  settings.max_turns = max_turns;
  settings.keep_transcripts = options.sample_transcripts > 0;

  const bool was_training = policy->is_training();
  policy->eval();
  // A dead environment ends the evaluation with that error; the policy is
  // left as it was found either way.
  struct RestoreMode {
    model::CausalLM& policy;
    bool training;
    ~RestoreMode() {
      if (training) policy->train();
    }
  } restore{policy, was_training};
  auto failed = [&streak](const std::exception& error) {
    if (streak.failure(error.what())) throw env::EnvironmentDead(streak.describe());
  };
  // Continuous batching: batch_size episodes in flight, each on its own
  // environment; an episode that ends frees its environment for the next
  // problem at once.
  model::EngineLimits limits;
  limits.kv_cache_tokens = options.batch_size * policy->config().max_position_embeddings;
  rollout::EpisodeEngine engine(tokenizer, settings, policy->config(), limits, seed);
  const int64_t concurrent = std::min(options.batch_size, total);
  while (static_cast<int64_t>(environments.size()) < concurrent) environments.push_back(nullptr);
  std::vector<size_t> free_environments;
  for (int64_t e = concurrent - 1; e >= 0; --e) free_environments.push_back(static_cast<size_t>(e));
  std::map<size_t, int64_t> problem_of_row;
  std::map<size_t, size_t> environment_of_row;
  std::vector<uint8_t> solved(static_cast<size_t>(total), 0);
  std::vector<std::string> transcripts(static_cast<size_t>(std::min(options.sample_transcripts, total)));
  EpisodeEvalResult result;
  double reward_sum = 0.0;
  int64_t turn_sum = 0;
  int64_t next_problem = 0;
  const auto open_next = [&] {
    while (next_problem < total && !free_environments.empty()) {
      const size_t e = free_environments.back();
      free_environments.pop_back();
      const int64_t problem = next_problem++;
      const size_t row = engine.open();
      problem_of_row[row] = problem;
      environment_of_row[row] = e;
      auto& slot = environments[e];
      try {
        if (!slot) slot = make_environment();
        if (options.learner_step >= 0) slot->on_training_step(options.learner_step);
        engine.reset_done(row, outcome(slot->reset_heldout(problem)));
        streak.success();
      } catch (const std::exception& error) {
        engine.reset_failed(row, error.what());
        slot.reset();  // a fresh one for the next episode
        failed(error);
      }
    }
  };
  const auto collect = [&] {
    for (const auto row_id : engine.row_ids()) {
      const auto& row = engine.row(row_id);
      if (row.state != rollout::RowState::kFinished && row.state != rollout::RowState::kLost) continue;
      const auto problem = static_cast<size_t>(problem_of_row.at(row_id));
      result.errors += row.env_error ? 1 : 0;
      result.successes += row.success ? 1 : 0;
      solved[problem] = row.success ? 1 : 0;
      reward_sum += row.reward_sum;
      for (const auto& [name, value] : row.counts) result.counts[name] += value;
      // A turn whose env step failed was still played.
      turn_sum += static_cast<int64_t>(row.turns.size()) + (row.current.action_tokens.empty() ? 0 : 1);
      if (problem < transcripts.size()) transcripts[problem] = row.transcript;
      free_environments.push_back(environment_of_row.at(row_id));
      problem_of_row.erase(row_id);
      environment_of_row.erase(row_id);
      engine.close(row_id);
    }
  };
  open_next();
  collect();
  while (engine.open_rows() > 0 || next_problem < total) {
    open_next();
    if (!engine.has_decode_work()) {
      collect();
      if (engine.open_rows() > 0 && !engine.has_decode_work()) {
        throw Error("evaluate_episodes: " + std::to_string(engine.open_rows()) +
                    " episodes wait with nothing to decode");
      }
      continue;
    }
    for (const auto& ended : engine.decode_step(policy, 0)) {
      auto& slot = environments[environment_of_row.at(ended.row)];
      try {
        engine.step_done(ended.row, outcome(slot->step(ended.action_text)));
        streak.success();
      } catch (const std::exception& error) {
        engine.step_failed(ended.row, error.what());
        slot.reset();
        failed(error);
      }
    }
    collect();
  }
  result.solved = std::move(solved);
  result.samples = std::move(transcripts);
  result.episodes = total;
  const int64_t answered = total - result.errors;
  result.success_rate = answered > 0 ? static_cast<double>(result.successes) / static_cast<double>(answered)
                                     : std::numeric_limits<double>::quiet_NaN();
  result.mean_reward = reward_sum / static_cast<double>(total);
  result.mean_turns = static_cast<double>(turn_sum) / static_cast<double>(total);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count();
  return result;
}

}  // namespace sao::train
