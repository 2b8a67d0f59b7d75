// Held-out evaluation: pass@1 of the policy on the task's test split, by
// exact match after the model's answer is cut at EOS.
#pragma once

#include "env/arithmetic.hpp"
#include "model/transformer.hpp"
#include "config/run_config.hpp"
#include "tokenizer/tokenizer.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace sao::train {

struct EvalResult {
  int64_t total = 0;
  int64_t correct = 0;
  double accuracy = 0.0;
  double mean_new_tokens = 0.0;
  int64_t worked = 0;          // answers in the worked form (ArithmeticTask::is_worked)
  int64_t worked_correct = 0;  // of those, how many were right
  double seconds = 0.0;
  std::vector<uint8_t> solved;              // 1 where test_set()[i] was answered correctly
  std::vector<std::string> sample_outputs;  // first few "prompt -> output" lines, for humans
};

// [BOS] + prompt bytes: what the policy sees before answering.
std::vector<int64_t> encode_prompt(const tokenizer::Tokenizer& tokenizer, const env::ArithmeticProblem& problem);
// The model's answer text: tokens before the first EOS, specials dropped.
std::string answer_text(const tokenizer::Tokenizer& tokenizer, const std::vector<int64_t>& generated);

// Scores `task`'s held-out split.
EvalResult evaluate_arithmetic(model::CausalLM& policy, const tokenizer::Tokenizer& tokenizer,
                               const env::ArithmeticTask& task, const config::EvalSection& options, uint64_t seed);

}  // namespace sao::train
