// Supervised warm start. Reinforcement learning from a random model earns no
// reward and so learns nothing; SFT on demonstrations gives the policy a
// starting point that is imperfect but not hopeless, which is where RL helps.
// The loop is here; its batches come from an environment's demonstrations or
// a file of them (train/episode_sft.hpp).
#pragma once

#include "config/run_config.hpp"
#include "model/transformer.hpp"
#include "report/progress.hpp"
#include "tokenizer/tokenizer.hpp"

#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

namespace sao::train {

struct SftBatch {
  torch::Tensor input_ids;    // [B, T] BOS prompt answer EOS, right-padded with PAD
  torch::Tensor target_mask;  // [B, T-1] true where the next token is part of the answer (incl. EOS)
  int64_t tokens = 0;         // real tokens in the batch
};

// Mean cross-entropy of the answer tokens; logits [B, T, V].
torch::Tensor sft_loss(const torch::Tensor& logits, const SftBatch& batch);
// Linear warm-up, then cosine decay to 10% of the peak.
double sft_learning_rate(const config::SftSection& options, int64_t step);

struct SftResult {
  int64_t steps = 0;
  double final_loss = 0.0;
  double seconds = 0.0;
  double tokens_per_s = 0.0;
};

// The one supervised training loop (AdamW, warm-up + cosine, clipping,
// progress and metrics). `next_batch(step)` supplies the data; `label` names
// the task in the progress line and the metrics.
using SftBatchMaker = std::function<SftBatch(int64_t step)>;
SftResult run_sft_loop(model::CausalLM& policy, const config::SftSection& options, const std::string& label,
                       const SftBatchMaker& next_batch, report::JsonlWriter* metrics);

// Throws unless `given` (the tasks or environments a warm start was handed)
// is one per curriculum phase plus one for the run's task.
void check_phase_count(const config::SftSection& options, size_t given, const char* what);

}  // namespace sao::train
