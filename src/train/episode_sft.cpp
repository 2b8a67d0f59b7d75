// Multi-turn supervised warm start; see episode_sft.hpp.
#include "train/episode_sft.hpp"

#include "base/error.hpp"
#include "tokenizer/load_tokenizer.hpp"

#include <algorithm>
#include <chrono>
#include <random>

namespace sao::train {

TokenizedEpisode tokenize_episode(const tokenizer::Tokenizer& tokenizer, const env::SftEpisode& episode) {
  TokenizedEpisode result;
  auto append = [&](const std::vector<int64_t>& ids, bool trained) {
    result.tokens.insert(result.tokens.end(), ids.begin(), ids.end());
    result.trained.insert(result.trained.end(), ids.size(), trained ? 1 : 0);
  };
  append(tokenizer.first_turn(episode.prompt, episode.tools), false);
  for (size_t t = 0; t < episode.turns.size(); ++t) {
    const auto& turn = episode.turns[t];
    append(tokenizer.encode(turn.action), turn.train);
    append(tokenizer.action_end(), turn.train);
    if (t + 1 == episode.turns.size()) break;  // the episode ended: its last observation is never shown
    const auto speaker = tokenizer::speaker_of(turn.observation_role, "demonstration turn " + std::to_string(t));
    append(tokenizer.next_turn(turn.observation, speaker, /*action_closed=*/true), false);
  }
  return result;
}

SftBatch make_episode_sft_batch(const tokenizer::Tokenizer& tokenizer, const std::vector<env::SftEpisode>& episodes,
                                int64_t max_length) {
  if (episodes.empty()) throw Error("make_episode_sft_batch: no episodes");
  std::vector<TokenizedEpisode> tokenized;
  size_t width = 0;
  for (size_t i = 0; i < episodes.size(); ++i) {
    tokenized.push_back(tokenize_episode(tokenizer, episodes[i]));
    const auto length = tokenized.back().tokens.size();
    if (max_length > 0 && static_cast<int64_t>(length) > max_length) {
      throw Error("make_episode_sft_batch: episode " + std::to_string(i) + " is " + std::to_string(length) +
                  " tokens, longer than the model's " + std::to_string(max_length) + " positions");
    }
    width = std::max(width, length);
  }
  const auto batch = static_cast<int64_t>(tokenized.size());
  SftBatch result;
  result.input_ids = torch::full({batch, static_cast<int64_t>(width)}, tokenizer::padding_id(tokenizer), torch::kInt64);
  result.target_mask = torch::zeros({batch, static_cast<int64_t>(width) - 1}, torch::kBool);
  auto ids = result.input_ids.accessor<int64_t, 2>();
  auto mask = result.target_mask.accessor<bool, 2>();
  for (int64_t row = 0; row < batch; ++row) {
    const auto& episode = tokenized[static_cast<size_t>(row)];
    for (size_t t = 0; t < episode.tokens.size(); ++t) {
      ids[row][static_cast<int64_t>(t)] = episode.tokens[t];
      // Token t is predicted at position t - 1 (token 0 is BOS, never trained).
      if (t > 0 && episode.trained[t]) mask[row][static_cast<int64_t>(t) - 1] = true;
    }
    result.tokens += static_cast<int64_t>(episode.tokens.size());
  }
  return result;
}

SftResult run_episode_sft(model::CausalLM& policy, const env::Environment& environment,
                          const tokenizer::Tokenizer& tokenizer, const config::SftSection& options, uint64_t seed,
                          report::JsonlWriter* metrics) {
  return run_episode_sft(policy, std::vector<const env::Environment*>{&environment}, tokenizer, options, seed, metrics);
}

SftResult run_episode_sft(model::CausalLM& policy, const std::vector<const env::Environment*>& phase_environments,
                          const tokenizer::Tokenizer& tokenizer, const config::SftSection& options, uint64_t seed,
                          report::JsonlWriter* metrics) {
  const auto next_batch =
      episode_batch_maker(phase_environments, tokenizer, options, seed, policy->config().max_position_embeddings);
  return run_sft_loop(policy, options, "sft " + phase_environments.back()->name(), next_batch, metrics);
}

SftBatchMaker episode_batch_maker(const std::vector<const env::Environment*>& phase_environments,
                                  const tokenizer::Tokenizer& tokenizer, const config::SftSection& options,
                                  uint64_t seed, int64_t max_length) {
  check_phase_count(options, phase_environments.size(), "environments");
  return [&phase_environments, &tokenizer, &options, seed, max_length](int64_t step) {
    const auto& environment = *phase_environments[config::sft_phase_of_step(options, step)];
    const auto episodes = environment.demonstrations(options.batch_size, seed + static_cast<uint64_t>(step) * 7919);
    // The three ways on, since an environment that cannot show answers
    // (an external program, most OpenEnv servers) is a normal setup.
    if (episodes.empty()) {
      throw Error("sft: environment '" + environment.name() +
                  "' has no demonstrations; give a file of them with sft.data=FILE (or sao sft --data FILE), "
                  "start from a trained policy with train.init_checkpoint=DIR, or skip the warm start with "
                  "sft.steps=0");
    }
    return make_episode_sft_batch(tokenizer, episodes, max_length);
  };
}

SftResult run_demonstration_sft(model::CausalLM& policy, const std::vector<env::SftEpisode>& episodes,
                                const std::string& label, const tokenizer::Tokenizer& tokenizer,
                                const config::SftSection& options, uint64_t seed, report::JsonlWriter* metrics) {
  if (episodes.empty()) throw Error("sft: " + label + ": no demonstrations");
  const int64_t max_length = policy->config().max_position_embeddings;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, episodes.size() - 1);
  return run_sft_loop(
      policy, options, "sft " + label,
      [&](int64_t) {
        std::vector<env::SftEpisode> batch;
        for (int64_t i = 0; i < options.batch_size; ++i) batch.push_back(episodes[pick(rng)]);
        return make_episode_sft_batch(tokenizer, batch, max_length);
      },
      metrics);
}

}  // namespace sao::train
