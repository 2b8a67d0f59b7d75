// The task-independent face of warm start and held-out evaluation: sft,
// eval and the learner call these, for every environment alike (its
// demonstrations, or sft.data's, for SFT; its held-out split for
// evaluation). No environment has a door of its own.
#pragma once

#include "config/run_config.hpp"
#include "env/environment.hpp"
#include "model/transformer.hpp"
#include "report/progress.hpp"
#include "train/episode_eval.hpp"
#include "train/sft.hpp"

#include <map>
#include <string>
#include <vector>

namespace sao::train {

struct HeldoutResult {
  // The success rate over the episodes the environment answered (total - errors).
  double accuracy = 0.0;
  int64_t total = 0;
  int64_t correct = 0;
  int64_t errors = 0;  // episodes lost to an environment error: not scored, reported with the accuracy
  double seconds = 0.0;
  // The environment's own tallies, summed over the episodes (info "counts";
  // arithmetic: "worked", "worked_correct"). Empty when it reports none.
  std::map<std::string, double> counts;
  std::vector<uint8_t> solved;       // 1 where held-out item i was solved, in split order
  std::vector<std::string> samples;  // a few transcripts for humans
};

// `learner_step` >= 0 tells a drifting environment where training is. An
// environment without a held-out split gives accuracy NaN and total 0.
// `pool` keeps the environments for the next call (episode_eval.hpp) when
// they are processes (the external task); others (OpenEnv sessions and
// servers, which training needs) are given back at the end of each call. Throws
// env::EnvironmentDead after train.max_env_failures_in_a_row environment
// failures in a row.
HeldoutResult evaluate_heldout(model::CausalLM& policy, const config::RunConfig& config, int64_t learner_step,
                               EnvironmentPool* pool = nullptr);
// The demonstrations of sft.data without those whose prompt is one of the
// task's held-out problems (their count in `dropped`); all of them with
// agent.endpoint, whose agents keep their own held-out problems. Throws sao::Error
// naming file:line for a bad line, or when nothing is left.
std::vector<env::SftEpisode> demonstrations_apart_from_heldout(const config::RunConfig& config, int64_t* dropped);
// Trains `policy` from its current weights on the task's demonstrations, or
// on sft.data's when set.
SftResult run_warm_start(model::CausalLM& policy, const config::RunConfig& config, report::JsonlWriter* metrics);

}  // namespace sao::train
