// Held-out evaluation; see evaluation.hpp.
#include "train/evaluation.hpp"

#include "model/generation.hpp"
#include "tokenizer/load_tokenizer.hpp"

#include <algorithm>
#include <chrono>

namespace sao::train {

std::vector<int64_t> encode_prompt(const tokenizer::Tokenizer& tokenizer, const env::ArithmeticProblem& problem) {
  return tokenizer.first_turn(problem.prompt(), "");
}

std::string answer_text(const tokenizer::Tokenizer& tokenizer, const std::vector<int64_t>& generated) {
  const auto stops = tokenizer.stop_ids();
  const auto end = std::find_first_of(generated.begin(), generated.end(), stops.begin(), stops.end());
  return tokenizer::decode_generated(tokenizer, std::vector<int64_t>(generated.begin(), end));
}

EvalResult evaluate_arithmetic(model::CausalLM& policy, const tokenizer::Tokenizer& tokenizer,
                               const env::ArithmeticTask& task, const config::EvalSection& options, uint64_t seed) {
  const auto& problems = task.test_set();
  const auto& answer_format = task.config().answer_format;
  const auto start = std::chrono::steady_clock::now();
  policy->eval();
  model::SamplingConfig sampling;
  sampling.temperature = options.temperature;
  sampling.max_new_tokens = options.max_new_tokens;
  sampling.stop_tokens = tokenizer.stop_ids();
  EvalResult result;
  int64_t new_tokens = 0;
  for (size_t begin = 0; begin < problems.size(); begin += static_cast<size_t>(options.batch_size)) {
    const size_t end = std::min(problems.size(), begin + static_cast<size_t>(options.batch_size));
    std::vector<std::vector<int64_t>> prompts;
    for (size_t i = begin; i < end; ++i) prompts.push_back(encode_prompt(tokenizer, problems[i]));
    const auto outputs = model::generate(policy, prompts, sampling, seed + begin);
    for (size_t i = begin; i < end; ++i) {
      const auto& generated = outputs[i - begin].tokens;
      const std::string text = answer_text(tokenizer, generated);
      const bool correct = env::ArithmeticTask::verify(problems[i], text, answer_format);
      result.correct += correct ? 1 : 0;
      if (env::ArithmeticTask::is_worked(text)) {
        result.worked += 1;
        result.worked_correct += correct ? 1 : 0;
      }
      result.solved.push_back(correct ? 1 : 0);
      new_tokens += static_cast<int64_t>(generated.size());
      if (result.sample_outputs.size() < 5) {
        result.sample_outputs.push_back(problems[i].prompt() + " -> " + text + (correct ? "  (correct)" : "  (wrong)"));
      }
    }
  }
  policy->train();
  result.total = static_cast<int64_t>(problems.size());
  result.accuracy = result.total > 0 ? static_cast<double>(result.correct) / static_cast<double>(result.total) : 0.0;
  result.mean_new_tokens = result.total > 0 ? static_cast<double>(new_tokens) / static_cast<double>(result.total) : 0;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace sao::train
