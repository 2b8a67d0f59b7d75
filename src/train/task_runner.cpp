// Task dispatch for warm start and evaluation; see task_runner.hpp.
#include "train/task_runner.hpp"

#include "base/error.hpp"
#include "env/environment.hpp"
#include "tokenizer/load_tokenizer.hpp"
#include "train/episode_eval.hpp"
#include "train/episode_sft.hpp"
#include "train/evaluation.hpp"

#include <limits>

namespace sao::train {

HeldoutResult evaluate_heldout(model::CausalLM& policy, const config::RunConfig& config, int64_t learner_step) {
  const auto loaded_tokenizer = tokenizer::load_tokenizer(config.model_path, config.prompt_format);
  const auto& tokenizer = *loaded_tokenizer;
  const auto seed = static_cast<uint64_t>(config.run.seed);
  HeldoutResult result;
  if (config.is_arithmetic()) {
    const env::ArithmeticTask task(config.task);
    const auto eval = evaluate_arithmetic(policy, tokenizer, task, config.eval, seed);
    result.accuracy = eval.accuracy;
    result.total = eval.total;
    result.correct = eval.correct;
    result.seconds = eval.seconds;
    result.samples = eval.sample_outputs;
    return result;
  }
  EpisodeEvalOptions options;
  options.temperature = config.eval.temperature;
  options.max_new_tokens = config.rollout.max_new_tokens;
  options.max_turns = config.rollout.max_turns;
  options.batch_size = config.eval.batch_size;
  options.learner_step = learner_step;
  const auto maker = [&config] {
    return env::make_environment(config.env.name, config.task_document, config.source + ".task");
  };
  if (maker()->heldout_size() == 0) {
    result.accuracy = std::numeric_limits<double>::quiet_NaN();  // nothing to evaluate on; reported as null
    return result;
  }
  const auto eval = evaluate_episodes(policy, tokenizer, maker, options, seed);
  result.accuracy = eval.success_rate;
  result.total = eval.episodes;
  result.correct = eval.successes;
  result.seconds = eval.seconds;
  result.samples = eval.samples;
  return result;
}

SftResult run_warm_start(model::CausalLM& policy, const config::RunConfig& config, report::JsonlWriter* metrics) {
  const auto loaded_tokenizer = tokenizer::load_tokenizer(config.model_path, config.prompt_format);
  const auto& tokenizer = *loaded_tokenizer;
  const auto seed = static_cast<uint64_t>(config.run.seed);
  if (config.is_arithmetic()) {
    const env::ArithmeticTask task(config.task);
    return run_sft(policy, task, tokenizer, config.sft, seed, metrics);
  }
  const auto environment = env::make_environment(config.env.name, config.task_document, config.source + ".task");
  return run_episode_sft(policy, *environment, tokenizer, config.sft, seed, metrics);
}

}  // namespace sao::train
