// `sao eval --checkpoint DIR`: held-out pass@1 of a saved policy, and with
// --pass-k K the pass@k table (K sampled attempts per problem). The task
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
#include "train/pass_at_k.hpp"
#include "train/task_runner.hpp"

#include <cstdio>

namespace sao::cli {

namespace {
// Each attempt is a full pass over the held-out split.
constexpr int64_t kMaxPassAtKSamples = 256;

void print_pass_at_k_result(const train::PassAtKResult& result, const std::string& checkpoint) {
  std::printf("held-out problems: %lld; greedy accuracy %.4f; %lld samples each at temperature %g (%.1f s)\n",
              static_cast<long long>(result.problems), result.greedy_accuracy,
              static_cast<long long>(result.samples_per_problem), result.temperature, result.seconds);
  nlohmann::json pass_at = nlohmann::json::object();
  for (const auto& [k, value] : result.pass_at) {
    std::printf("  pass@%-4lld %.4f\n", static_cast<long long>(k), value);
    pass_at[std::to_string(k)] = value;
  }
  const nlohmann::json line = {{"eval", true},
                               {"split", "test"},
                               {"checkpoint", checkpoint},
                               {"greedy_accuracy", result.greedy_accuracy},
                               {"problems", result.problems},
                               {"samples", result.samples_per_problem},
                               {"temperature", result.temperature},
                               {"pass_at", pass_at},
                               {"seconds", result.seconds}};
  std::printf("%s\n", base::dump_json(line).c_str());
  std::fflush(stdout);
}
}  // namespace

int run_eval(const Args& args) {
  auto specs = config_flags();
  specs.push_back({"--checkpoint", true, false, "checkpoint directory (config.json + model.safetensors)"});
  specs.push_back({"--trust-checkpoint-env", false, false,
                   "run the external environment command stored with the checkpoint (otherwise give it with "
                   "--config/--set)"});
  specs.push_back(
      {"--pass-k", true, false, "also sample K attempts per held-out problem and print pass@1..K (1 <= K <= 256)"});
  specs.push_back({"--pass-k-temperature", true, false, "sampling temperature of the --pass-k attempts (default 1.0)"});
  const auto parsed = parse_args("eval", specs, args);
  if (parsed.has("--help")) {
    std::printf("usage: sao eval --checkpoint DIR [options]\n%s", flags_help(specs).c_str());
    return 0;
  }
  if (!parsed.has("--checkpoint")) throw Error("--checkpoint DIR is required");
  // Flags are checked before the checkpoint is loaded, so a typo costs nothing.
  if (parsed.has("--pass-k-temperature") && !parsed.has("--pass-k"))
    throw Error("--pass-k-temperature needs --pass-k K");
  const auto samples = parsed.get_int("--pass-k", 8);
  if (parsed.has("--pass-k") && (samples < 1 || samples > kMaxPassAtKSamples))
    throw Error("--pass-k: K must be in [1, " + std::to_string(kMaxPassAtKSamples) + "], got " +
                std::to_string(samples));
  const auto temperature = parsed.get_double("--pass-k-temperature", 1.0);
  if (temperature <= 0.0) throw Error("--pass-k-temperature: must be > 0, got " + parsed.get("--pass-k-temperature"));
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
  if (parsed.has("--pass-k")) {
    const auto result = train::evaluate_pass_at_k(policy, config, samples, temperature, step.get<int64_t>());
    print_pass_at_k_result(result, sources.checkpoint_dir);
    return 0;
  }
  const auto result = train::evaluate_heldout(policy, config, step.get<int64_t>());
  print_eval_result(result, sources.checkpoint_dir);
  return 0;
}

}  // namespace sao::cli
