// `sao train`: loads (or first trains) the SFT warm start, then runs RL with
// the actor runtime. Ctrl-C / SIGTERM end the run with a final evaluation and
// checkpoint instead of killing it.
#include "actors/train.hpp"
#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "model/checkpoint.hpp"
#include "runtime/error.hpp"
#include "runtime/system_info.hpp"
#include "train/task_runner.hpp"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>

namespace sao::cli {

namespace {
std::atomic<bool> g_stop_requested{false};

extern "C" void request_stop(int) {
  g_stop_requested.store(true);
}

// The warm start: the configured checkpoint, or RUN_DIR/sft (trained now if missing).
model::CausalLM warm_start_policy(const runtime::RunConfig& config) {
  if (!config.train.init_checkpoint.empty()) return model::load_policy_checkpoint(config.train.init_checkpoint);
  const std::string sft_dir = (std::filesystem::path(config.run.dir) / "sft").string();
  if (std::filesystem::exists(std::filesystem::path(sft_dir) / "model.safetensors")) {
    std::fprintf(stderr, "train: warm start from %s\n", sft_dir.c_str());
    return model::load_policy_checkpoint(sft_dir);
  }
  std::fprintf(stderr, "train: no warm start at %s, running SFT first\n", sft_dir.c_str());
  train::SftResult result;
  auto policy = sft_from_scratch(config, &result);
  std::fprintf(stderr, "train: SFT took %.1f s, saved %s\n", result.seconds, sft_dir.c_str());
  return policy;
}
}  // namespace

int run_train(const Args& args) {
  auto specs = config_flags();
  specs.push_back({"--steps", true, false, "override train.steps"});
  specs.push_back({"--resume", false, false, "continue from RUN_DIR/checkpoint (learner state included)"});
  const auto parsed = parse_args("train", specs, args);
  if (parsed.has("--help")) {
    std::printf("usage: sao train [options]\n%s", flags_help(specs).c_str());
    return 0;
  }
  auto config = load_config_from_args(parsed);
  config.train.steps = parsed.get_int("--steps", config.train.steps);
  write_resolved_config(config);
  if (!config.rollout.temperature_is_policy()) {
    std::fprintf(stderr,
                 "train: WARNING: rollouts sample with temperature %.3g, top_k %lld, top_p %.3g; the recorded "
                 "log-probs are of that distribution, not the policy's own\n",
                 config.rollout.temperature, static_cast<long long>(config.rollout.top_k), config.rollout.top_p);
  }
  std::string resume_from;
  model::CausalLM policy{nullptr};
  if (parsed.has("--resume")) {
    const auto checkpoint = (std::filesystem::path(config.run.dir) / "checkpoint").string();
    policy = model::load_policy_checkpoint(checkpoint + "/policy");
    resume_from = checkpoint + "/learner";
    std::fprintf(stderr, "train: resuming from %s\n", checkpoint.c_str());
  } else {
    policy = warm_start_policy(config);
  }
  runtime::configure_threads(config.threads.train_intra_op);
  std::signal(SIGINT, request_stop);
  std::signal(SIGTERM, request_stop);
  std::fprintf(stderr, "train: %s, %s mode, %lld steps, %lld rollout x %lld episodes, run dir %s\n",
               algo::algorithm_name(config.learner.algorithm), config.train.mode.c_str(),
               static_cast<long long>(config.train.steps), static_cast<long long>(config.rollout.num_actors),
               static_cast<long long>(config.rollout.episodes_per_actor), config.run.dir.c_str());
  const auto outcome = actors::run_training(config, policy, resume_from, &g_stop_requested);
  std::printf("train: finished (%s) after %lld learner steps, policy version %lld\n", outcome.reason.c_str(),
              static_cast<long long>(outcome.steps), static_cast<long long>(outcome.policy_version));
  if (!outcome.summary_json.empty()) {
    const auto summary = nlohmann::json::parse(outcome.summary_json, nullptr, /*allow_exceptions=*/false);
    if (summary.is_object() && summary.contains("accuracy_last") && summary["accuracy_last"].is_number()) {
      std::printf("held-out accuracy: %.4f (before RL: %.4f), run dir %s\n", summary["accuracy_last"].get<double>(),
                  summary.value("accuracy_first", 0.0), config.run.dir.c_str());
    }
    std::printf("%s\n", outcome.summary_json.c_str());
  }
  if (outcome.actors_left_running != 0) {
    std::fprintf(stderr, "train: %lld actors still running at exit\n",
                 static_cast<long long>(outcome.actors_left_running));
    return 4;
  }
  return outcome.reason.rfind("learner failed", 0) == 0 ? 1 : 0;
}

}  // namespace sao::cli
