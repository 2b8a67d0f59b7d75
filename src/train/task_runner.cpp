// Task dispatch for warm start and evaluation; see task_runner.hpp.
#include "train/task_runner.hpp"

#include "base/error.hpp"
#include "env/environment.hpp"
#include "env/tasks/data_file.hpp"
#include "tokenizer/load_tokenizer.hpp"
#include "train/episode_eval.hpp"
#include "train/episode_sft.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <unordered_set>

namespace sao::train {

namespace {
// Checking more held-out prompts than this would cost more than the warm start.
constexpr int64_t kMaxHeldoutPromptsChecked = 100000;
}  // namespace

HeldoutResult evaluate_heldout(model::CausalLM& policy, const config::RunConfig& config, int64_t learner_step,
                               EnvironmentPool* pool) {
  const auto loaded_tokenizer = tokenizer::load_tokenizer(config.model_path, config.prompt_format);
  const auto& tokenizer = *loaded_tokenizer;
  const auto seed = static_cast<uint64_t>(config.run.seed);
  HeldoutResult result;
  EpisodeEvalOptions options;
  options.temperature = config.eval.temperature;
  options.max_new_tokens = config.eval_max_new_tokens();
  options.max_turns = config.rollout.max_turns;
  options.batch_size = config.eval.batch_size;
  options.learner_step = learner_step;
  options.max_failures_in_a_row = config.train.max_env_failures_in_a_row;
  const auto maker = [&config] {
    return env::make_environment(config.env.name, config.task_document, config.where("task"));
  };
  const bool pooled = pool != nullptr && !pool->environments.empty() && pool->environments.front();
  if ((pooled ? pool->environments.front()->heldout_size() : maker()->heldout_size()) == 0) {
    result.accuracy = std::numeric_limits<double>::quiet_NaN();  // nothing to evaluate on; reported as null
    return result;
  }
  // Processes (the external task) are kept for the next evaluation; other
  // environments are given back now: an OpenEnv server session or claimed
  // server held between evaluations would be missing to training.
  struct GiveBack {
    EnvironmentPool* pool;
    bool keep;
    ~GiveBack() {
      if (pool != nullptr && !keep) pool->environments.clear();
    }
  } give_back{pool, config.env.name == "external"};
  const auto eval = evaluate_episodes(policy, tokenizer, maker, options, seed, pool);
  result.accuracy = eval.success_rate;
  result.total = eval.episodes;
  result.correct = eval.successes;
  result.errors = eval.errors;
  result.seconds = eval.seconds;
  result.samples = eval.samples;
  result.solved = eval.solved;
  result.counts = eval.counts;
  return result;
}

std::vector<env::SftEpisode> demonstrations_apart_from_heldout(const config::RunConfig& config, int64_t* dropped) {
  auto episodes = env::read_demonstration_file(config.sft.data, config.where("sft") + ".data");
  *dropped = 0;
  // The agent endpoint's episodes come from agents, which keep their own
  // held-out problems: the configured task is not the one being learned.
  if (config.agent.endpoint) return episodes;
  const auto environment = env::make_environment(config.env.name, config.task_document, config.where("task"));
  // Held-out prompts, so that no demonstration teaches an evaluation problem.
  std::unordered_set<std::string> heldout_prompts;
  const int64_t heldout = std::min<int64_t>(environment->heldout_size(), kMaxHeldoutPromptsChecked);
  for (int64_t i = 0; i < heldout; ++i) heldout_prompts.insert(environment->reset_heldout(i).observation);
  const auto before = episodes.size();
  episodes.erase(
      std::remove_if(episodes.begin(), episodes.end(),
                     [&](const env::SftEpisode& episode) { return heldout_prompts.count(episode.prompt) > 0; }),
      episodes.end());
  *dropped = static_cast<int64_t>(before - episodes.size());
  if (episodes.empty()) {
    throw Error(config.sft.data + ": every demonstration's prompt is a held-out problem of task '" + config.env.name +
                "' (" + std::to_string(before) + " dropped); nothing is left to train on");
  }
  return episodes;
}

SftResult run_warm_start(model::CausalLM& policy, const config::RunConfig& config, report::JsonlWriter* metrics) {
  const auto loaded_tokenizer = tokenizer::load_tokenizer(config.model_path, config.prompt_format);
  const auto& tokenizer = *loaded_tokenizer;
  const auto seed = static_cast<uint64_t>(config.run.seed);
  if (!config.sft.data.empty()) {
    int64_t dropped = 0;
    const auto episodes = demonstrations_apart_from_heldout(config, &dropped);
    std::fprintf(stderr, "sft: %zu demonstrations from %s", episodes.size(), config.sft.data.c_str());
    if (dropped > 0)
      std::fprintf(stderr, " (%lld dropped: prompt of a held-out problem)", static_cast<long long>(dropped));
    std::fprintf(stderr, "\n");
    return run_demonstration_sft(policy, episodes, "data", tokenizer, config.sft, seed, metrics);
  }
  const auto phases = config.sft.curriculum.size();
  auto phase_where = [&](size_t phase) {
    return config.where("sft") + ".curriculum[" + std::to_string(phase) + "].task";
  };
  std::vector<std::unique_ptr<env::Environment>> owned;
  std::vector<const env::Environment*> phase_environments;
  for (size_t phase = 0; phase <= phases; ++phase) {
    owned.push_back(
        phase < phases
            ? env::make_environment(config.env.name, config::sft_phase_task(config, phase), phase_where(phase))
            : env::make_environment(config.env.name, config.task_document, config.where("task")));
    phase_environments.push_back(owned.back().get());
  }
  return run_episode_sft(policy, phase_environments, tokenizer, config.sft, seed, metrics);
}

}  // namespace sao::train
