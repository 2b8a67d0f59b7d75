// Held-out evaluation for multi-turn environments: plays the environment's
// held-out split (reset_heldout(0..n)) with the policy, greedy by default,
// through the same episode state machine the rollout actor uses
// (rollout/episode_engine.hpp: prompt, turns, end and success are defined
// there). An episode cut by max_turns or the model's context is a failure.
// One whose environment throws is counted in `errors` and left out of
// success_rate (the policy was not scored on it; docs/decisions.md), and
// does not abort the evaluation, unless max_failures_in_a_row environment
// calls fail in a row: then the environment is dead (env/failure_streak.hpp)
// and evaluate_episodes throws env::EnvironmentDead after that many failures
// instead of one failure per held-out problem.
#pragma once

#include "env/environment.hpp"
#include "env/failure_streak.hpp"
#include "model/transformer.hpp"
#include "tokenizer/tokenizer.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace sao::train {

struct EpisodeEvalOptions {
  double temperature = 0.0;    // 0 = greedy
  int64_t max_new_tokens = 8;  // per turn
  int64_t max_turns = 0;       // 0: the environment's limits().max_turns, or 64 if it states none
  int64_t batch_size = 64;     // episodes decoded together
  int64_t episodes = 0;        // 0: the whole held-out split; else the first N of it
  int64_t learner_step = -1;   // >= 0: passed to on_training_step before the episodes (drifting envs)
  int64_t sample_transcripts = 3;
  int64_t max_failures_in_a_row = 0;  // train.max_env_failures_in_a_row; 0: never give up
};

struct EpisodeEvalResult {
  int64_t episodes = 0;
  int64_t successes = 0;
  int64_t errors = 0;  // episodes whose environment threw: not scored
  // successes / (episodes - errors): the policy's score on the episodes the
  // environment answered; NaN when it answered none.
  double success_rate = 0.0;
  double mean_reward = 0.0;  // mean over episodes of the summed per-turn rewards
  double mean_turns = 0.0;
  double seconds = 0.0;
  // Each name the environment reported in info "counts", summed over the
  // finished episodes (arithmetic: "worked", "worked_correct").
  std::map<std::string, double> counts;
  std::vector<uint8_t> solved;       // 1 where held-out episode i succeeded
  std::vector<std::string> samples;  // "obs0 | action -> obs1 | ... => success" for the first few
};

// Makes one fresh environment; called once per concurrent episode.
using EnvironmentMaker = std::function<std::unique_ptr<env::Environment>()>;

// Environments kept from one evaluation to the next, so that an environment
// that is a process (external) or a server session (openenv) starts once per
// run, not once per held-out episode: an evaluation plays its episodes
// batch_size at a time on at most batch_size environments, each reset again
// for its next episode. One whose episode failed is dropped (an external
// process is stopped) and a fresh one made when next needed. The caller owns
// it (the learner keeps one for the run).
struct EnvironmentPool {
  std::vector<std::unique_ptr<env::Environment>> environments;
};

// Throws sao::Error if the environment has no held-out split, and
// env::EnvironmentDead (a sao::Error) when max_failures_in_a_row calls fail
// in a row. `pool`: environments to reuse and keep (nullptr: made for this
// call only).
EpisodeEvalResult evaluate_episodes(model::CausalLM& policy, const tokenizer::Tokenizer& tokenizer,
                                    const EnvironmentMaker& make_environment, const EpisodeEvalOptions& options,
                                    uint64_t seed, EnvironmentPool* pool = nullptr);

}  // namespace sao::train
