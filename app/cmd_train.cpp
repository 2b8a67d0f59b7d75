// `sao train`: loads (or first trains) the SFT warm start, then runs RL with
// the actor runtime. Ctrl-C / SIGTERM end the run with a final evaluation and
// checkpoint instead of killing it.
#include "actors/train.hpp"
#include "app/commands.hpp"
#include "app/common.hpp"

#include <chrono>
#include <cstdio>

namespace sao::cli {

int run_train(const Args& args) {
  const auto specs = training_flags();
  const auto parsed = parse_args("train", specs, args);
  if (parsed.has("--help")) {
    std::printf("usage: sao train [options]\n%s", flags_help(specs).c_str());
    return 0;
  }
  const auto started = std::chrono::steady_clock::now();
  auto start = prepare_training(parsed, "train");
  const auto& config = start.config;
  const auto* stop_requested = install_stop_handlers();
  std::fprintf(stderr, "train: %s, %s mode, %lld steps, %lld rollout x %lld episodes, run dir %s\n",
               algo::algorithm_name(config.learner.algorithm), config.train.mode.c_str(),
               static_cast<long long>(config.train.steps), static_cast<long long>(config.rollout.num_actors),
               static_cast<long long>(config.rollout.slots), config.run.dir.c_str());
  const auto outcome = actors::run_training(config, start.policy, start.resume_from, stop_requested);
  return report_training_outcome(outcome, config, "train",
                                 std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
}

}  // namespace sao::cli
