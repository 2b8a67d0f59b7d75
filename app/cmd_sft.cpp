// `sao sft`: supervised warm start from scratch, then held-out evaluation.
#include "app/commands.hpp"
#include "app/common.hpp"
#include "base/error.hpp"
#include "model/checkpoint.hpp"
#include "train/memory_estimate.hpp"
#include "train/task_runner.hpp"

#include <cstdio>
#include <filesystem>

namespace sao::cli {

int run_sft(const Args& args) {
  auto specs = config_flags();
  specs.push_back({"--steps", true, false, "override sft.steps"});
  specs.push_back({"--data", true, false, "demonstrations from a JSON-lines file (sets sft.data)"});
  const auto parsed = parse_args("sft", specs, args);
  if (parsed.has("--help")) {
    std::printf("usage: sao sft [options]\n%s", flags_help(specs).c_str());
    return 0;
  }
  std::vector<std::string> extra;
  if (parsed.has("--data")) extra.push_back("sft.data=" + json_string("--data", parsed.get("--data")));
  auto config = load_config_from_args(parsed, "sft.steps", extra);
  train::require_memory(train::estimate_sft_memory(config), train::available_memory_bytes(), config.source);
  write_resolved_config(config);
  std::fprintf(stderr, "sft: %lld parameters, task %s, %lld steps of batch %lld, run dir %s\n",
               static_cast<long long>(config.model.parameter_count()), config.env.name.c_str(),
               static_cast<long long>(config.sft.steps), static_cast<long long>(config.sft.batch_size),
               config.run.dir.c_str());
  train::SftResult result;
  auto policy = train_warm_start(config, &result);
  const std::string checkpoint = model::sft_checkpoint_dir(config.run.dir);
  std::printf("sft: %lld steps in %.1f s (%.0f tokens/s), final loss %.4f, saved %s\n",
              static_cast<long long>(result.steps), result.seconds, result.tokens_per_s, result.final_loss,
              checkpoint.c_str());
  const auto eval = train::evaluate_heldout(policy, config, /*learner_step=*/0);
  report::JsonlWriter metrics((std::filesystem::path(config.run.dir) / "sft_metrics.jsonl").string());
  metrics.write({{"eval", true},
                 {"split", "test"},
                 {"stage", "sft"},
                 {"heldout_accuracy", eval.accuracy},
                 {"wall_time_s", result.seconds + eval.seconds}});
  print_eval_result(eval, checkpoint);
  return 0;
}

}  // namespace sao::cli
