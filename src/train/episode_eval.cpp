// Held-out multi-turn evaluation; see episode_eval.hpp.
#include "train/episode_eval.hpp"

#include "base/error.hpp"
#include "rollout/episode_batch.hpp"

#include <algorithm>
#include <chrono>
#include <limits>

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
  EpisodeEvalResult result;
  double reward_sum = 0.0;
  int64_t turn_sum = 0;
  for (int64_t begin = 0; begin < total; begin += options.batch_size) {
    const int64_t count = std::min(options.batch_size, total - begin);
    while (static_cast<int64_t>(environments.size()) < count) environments.push_back(nullptr);
    rollout::EpisodeBatch batch(tokenizer, settings, static_cast<size_t>(count));
    for (int64_t r = 0; r < count; ++r) {
      auto& slot = environments[static_cast<size_t>(r)];
      try {
        if (!slot) slot = make_environment();
        if (options.learner_step >= 0) slot->on_training_step(options.learner_step);
        batch.reset_done(static_cast<size_t>(r), outcome(slot->reset_heldout(begin + r)));
        streak.success();
      } catch (const std::exception& error) {
        batch.reset_failed(static_cast<size_t>(r), error.what());
        slot.reset();  // a fresh one for the next episode
        failed(error);
      }
    }
    if (batch.start(seed + static_cast<uint64_t>(begin), policy->config().max_position_embeddings)) {
      while (batch.any_generating()) {
        for (const auto& ended : batch.decode_step(policy, 0)) {
          auto& slot = environments[ended.row];
          try {
            batch.step_done(ended.row, outcome(slot->step(ended.action_text)));
            streak.success();
          } catch (const std::exception& error) {
            batch.step_failed(ended.row, error.what());
            slot.reset();
            failed(error);
          }
        }
      }
    }
    for (size_t r = 0; r < batch.size(); ++r) {
      const auto& row = batch.row(r);
      result.errors += row.env_error ? 1 : 0;
      result.successes += row.success ? 1 : 0;
      result.solved.push_back(row.success ? 1 : 0);
      reward_sum += row.reward_sum;
      // A turn whose env step failed was still played.
      turn_sum += static_cast<int64_t>(row.turns.size()) + (row.current.action_tokens.empty() ? 0 : 1);
      if (static_cast<int64_t>(result.samples.size()) < options.sample_transcripts) {
        result.samples.push_back(row.transcript);
      }
    }
  }
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
