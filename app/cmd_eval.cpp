// `sao eval --checkpoint DIR`: held-out pass@1 of a saved policy. The task
// and eval settings come from the config stored with the checkpoint, so a
// model is scored on the split it was kept away from; --config/--set override.
#include "app/commands.hpp"
#include "app/common.hpp"
#include "model/checkpoint.hpp"
#include "base/error.hpp"
#include "report/system_info.hpp"
#include "train/task_runner.hpp"

#include <cstdio>

namespace sao::cli {

int run_eval(const Args& args) {
  auto specs = config_flags();
  specs.push_back({"--checkpoint", true, false, "checkpoint directory (config.json + model.safetensors)"});
  const auto parsed = parse_args("eval", specs, args);
  if (parsed.has("--help")) {
    std::printf("usage: sao eval --checkpoint DIR [options]\n%s", flags_help(specs).c_str());
    return 0;
  }
  if (!parsed.has("--checkpoint")) throw Error("--checkpoint DIR is required");
  const std::string checkpoint = parsed.get("--checkpoint");
  nlohmann::json info;
  auto policy = model::load_policy_checkpoint(checkpoint, &info);
  nlohmann::json document = info.contains("run_config") ? info["run_config"] : config::default_config_document();
  if (parsed.has("--config")) document.merge_patch(config::read_json_file(parsed.get("--config")));
  for (const auto& assignment : parsed.all("--set")) config::apply_override(document, assignment);
  const auto config =
      config::parse_run_config(document, parsed.has("--config") ? parsed.get("--config") : checkpoint + "/sao.json");
  report::configure_threads(config.threads.torch_intra_op);
  const auto result = train::evaluate_heldout(policy, config, info.value("step", int64_t{0}));
  print_eval_result(result, checkpoint);
  return 0;
}

}  // namespace sao::cli
