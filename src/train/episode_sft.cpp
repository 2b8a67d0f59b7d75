// Multi-turn supervised warm start; see episode_sft.hpp.
#include "train/episode_sft.hpp"

#include "runtime/error.hpp"

#include <algorithm>
#include <chrono>

namespace sao::train {

TokenizedEpisode tokenize_episode(const tokenizer::Tokenizer& tokenizer, const env::SftEpisode& episode) {
  TokenizedEpisode result;
  auto append = [&](const std::vector<int64_t>& ids, bool trained) {
    result.tokens.insert(result.tokens.end(), ids.begin(), ids.end());
    result.trained.insert(result.trained.end(), ids.size(), trained ? 1 : 0);
  };
  append({tokenizer.bos_id()}, false);
  append(tokenizer.encode(episode.prompt), false);
  for (size_t t = 0; t < episode.turns.size(); ++t) {
    const auto& turn = episode.turns[t];
    append(tokenizer.encode(turn.action), turn.train);
    append({tokenizer.eos_id()}, turn.train);
    if (t + 1 == episode.turns.size()) break;  // the episode ended: its last observation is never shown
    if (turn.observation.empty()) {
      const auto obs = tokenizer.special_id("<|obs|>");
      if (!obs) throw Error("tokenize_episode: empty observation needs an <|obs|> token, which this tokenizer lacks");
      append({*obs}, false);
    } else {
      append(tokenizer.encode(turn.observation), false);
    }
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
  result.input_ids = torch::full({batch, static_cast<int64_t>(width)}, tokenizer.pad_id(), torch::kInt64);
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
                          const tokenizer::Tokenizer& tokenizer, const runtime::SftSection& options, uint64_t seed,
                          runtime::JsonlWriter* metrics) {
  torch::optim::AdamW optimizer(policy->parameters(),
                                torch::optim::AdamWOptions(options.learning_rate).weight_decay(options.weight_decay));
  policy->train();
  runtime::ProgressLine progress("sft " + environment.name(), options.steps);
  SftResult result;
  int64_t total_tokens = 0;
  for (int64_t step = 0; step < options.steps; ++step) {
    const auto episodes = environment.demonstrations(options.batch_size, seed + static_cast<uint64_t>(step) * 7919);
    if (episodes.empty()) throw Error("sft: environment '" + environment.name() + "' has no demonstrations");
    const auto batch = make_episode_sft_batch(tokenizer, episodes, policy->config().max_position_embeddings);
    const double learning_rate = sft_learning_rate(options, step);
    for (auto& group : optimizer.param_groups()) {
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(learning_rate);
    }
    optimizer.zero_grad();
    auto loss = sft_loss(policy->forward(batch.input_ids), batch);
    loss.backward();
    const double grad_norm = torch::nn::utils::clip_grad_norm_(policy->parameters(), options.grad_clip);
    optimizer.step();
    result.final_loss = loss.item<double>();
    total_tokens += batch.tokens;
    if (options.log_every > 0 && ((step + 1) % options.log_every == 0 || step + 1 == options.steps)) {
      const double rate = static_cast<double>(total_tokens) / std::max(progress.elapsed_seconds(), 1e-9);
      progress.print(step + 1, {{"loss", result.final_loss}, {"lr", learning_rate}, {"grad_norm", grad_norm}}, rate,
                     "tok");
      if (metrics != nullptr) {
        metrics->write({{"sft_step", step + 1}, {"env", environment.name()}, {"loss", result.final_loss},
                        {"learning_rate", learning_rate}, {"grad_norm", grad_norm},
                        {"wall_time_s", progress.elapsed_seconds()}});
      }
    }
  }
  result.steps = options.steps;
  result.seconds = progress.elapsed_seconds();
  result.tokens_per_second = static_cast<double>(total_tokens) / std::max(result.seconds, 1e-9);
  return result;
}

}  // namespace sao::train
