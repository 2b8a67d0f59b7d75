// `sao eval --checkpoint DIR`: held-out pass@1 of a saved policy. The task
// and eval settings come from the config stored with the checkpoint, so a
// model is scored on the split it was kept away from; --config/--set override.
// A checkpoint never chooses a program to run: an external environment
// stored with it is used only with --trust-checkpoint-env
// (train/eval_config.hpp).
#include "app/commands.hpp"
#include "app/common.hpp"
#include "base/error.hpp"
#include "base/json_parse.hpp"
#include "model/checkpoint.hpp"
#include "report/system_info.hpp"
#include "train/eval_config.hpp"
#include "train/task_runner.hpp"

#include <cstdio>

namespace sao::cli {

int run_eval(const Args& args) {
  auto specs = config_flags();
  specs.push_back({"--checkpoint", true, false, "checkpoint directory (config.json + model.safetensors)"});
  specs.push_back({"--trust-checkpoint-env", false, false,
                   "run the external environment command stored with the checkpoint (otherwise give it with "
                   "--config/--set)"});
  const auto parsed = parse_args("eval", specs, args);
  if (parsed.has("--help")) {
    std::printf("usage: sao eval --checkpoint DIR [options]\n%s", flags_help(specs).c_str());
    return 0;
  }
  if (!parsed.has("--checkpoint")) throw Error("--checkpoint DIR is required");
  train::EvalConfigSources sources;
  sources.checkpoint_dir = parsed.get("--checkpoint");
  auto policy = model::load_policy_checkpoint(sources.checkpoint_dir, &sources.checkpoint_info);
  if (parsed.has("--config")) sources.config_file = parsed.get("--config");
  sources.overrides = parsed.all("--set");
  sources.trust_checkpoint_env = parsed.has("--trust-checkpoint-env");
  const auto config = train::eval_run_config(sources);
  const auto step = sources.checkpoint_info.value("step", nlohmann::json(0));
  if (!step.is_number_integer())
    throw Error("checkpoint " + sources.checkpoint_dir + "/sao.json: step must be an integer, got " +
                base::dump_json(step));
  report::configure_threads(config.threads.torch_intra_op);
  const auto result = train::evaluate_heldout(policy, config, step.get<int64_t>());
  print_eval_result(result, sources.checkpoint_dir);
  return 0;
}

}  // namespace sao::cli
