// Supervised warm start for multi-turn environments. An environment's
// demonstrations (env::SftEpisode, plain text) become token sequences laid out
// exactly as the rollout lays out a played episode:
//   [BOS] prompt  action_1 [EOS] observation_1  action_2 [EOS] ... action_n [EOS]
// (an empty observation between two actions becomes one <|obs|> token, as in
// the rollout). The loss falls only on action tokens and their EOS, and only
// for turns marked train; prompts and observations are context.
#pragma once

#include "config/run_config.hpp"
#include "env/environment.hpp"
#include "model/transformer.hpp"
#include "report/progress.hpp"
#include "tokenizer/tokenizer.hpp"
#include "train/sft.hpp"

#include <cstdint>
#include <vector>

namespace sao::train {

struct TokenizedEpisode {
  std::vector<int64_t> tokens;
  std::vector<uint8_t> trained;  // per token: 1 where the token is a trained action token (or its EOS)
};

// Throws sao::Error if the tokenizer has no <|obs|> token and one is needed.
TokenizedEpisode tokenize_episode(const tokenizer::Tokenizer& tokenizer, const env::SftEpisode& episode);

// Right-padded batch; target_mask[b][t-1] is true where token t is trained
// (so train::sft_loss applies unchanged). max_length > 0: an episode longer
// than that throws sao::Error naming the episode and both lengths (it would
// not fit the model's positions).
SftBatch make_episode_sft_batch(const tokenizer::Tokenizer& tokenizer, const std::vector<env::SftEpisode>& episodes,
                                int64_t max_length = 0);

// The batches of a warm start on environments: step s draws batch_size
// demonstrations from phase_environments[config::sft_phase_of_step(s)]
// (.back() after the curriculum's phases), seeded by `seed` and s. Throws
// sao::Error unless there is one environment per phase plus one, and when
// the environment has no demonstrations (naming the three ways on). Keeps
// references to its arguments.
SftBatchMaker episode_batch_maker(const std::vector<const env::Environment*>& phase_environments,
                                  const tokenizer::Tokenizer& tokenizer, const config::SftSection& options,
                                  uint64_t seed, int64_t max_length);

// Trains `policy` in place on environment.demonstrations(batch_size, ...)
// drawn fresh every step (AdamW, warm-up then cosine, as run_sft). Throws
// sao::Error when the environment has no demonstrations. Writes one JSON line
// per logged step to `metrics` when given.
SftResult run_episode_sft(model::CausalLM& policy, const env::Environment& environment,
                          const tokenizer::Tokenizer& tokenizer, const config::SftSection& options, uint64_t seed,
                          report::JsonlWriter* metrics);
// The same with one environment per curriculum phase: phase_environments[k]
// supplies phase k (config::sft_phase_of_step), .back() the steps after them.
SftResult run_episode_sft(model::CausalLM& policy, const std::vector<const env::Environment*>& phase_environments,
                          const tokenizer::Tokenizer& tokenizer, const config::SftSection& options, uint64_t seed,
                          report::JsonlWriter* metrics);

// Trains `policy` in place on `episodes` (demonstrations from a file), a
// batch of batch_size drawn at random every step. Throws sao::Error when
// `episodes` is empty. `label` names the data in progress and metrics.
SftResult run_demonstration_sft(model::CausalLM& policy, const std::vector<env::SftEpisode>& episodes,
                                const std::string& label, const tokenizer::Tokenizer& tokenizer,
                                const config::SftSection& options, uint64_t seed, report::JsonlWriter* metrics);

}  // namespace sao::train
