// Shared subcommand helpers; see common.hpp.
#include "cli/common.hpp"

#include "model/checkpoint.hpp"
#include "runtime/system_info.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace sao::cli {

std::vector<FlagSpec> config_flags() {
  return {{"--config", true, false, "run config JSON (default: the embedded config/default.json)"},
          {"--set", true, true, "override a config key, e.g. --set sft.steps=100 (repeatable)"},
          {"--run-dir", true, false, "run directory (default: run.dir from the config)"},
          {"--help", false, false, "show this help"}};
}

runtime::RunConfig load_config_from_args(const ParsedArgs& parsed) {
  auto overrides = parsed.all("--set");
  if (parsed.has("--run-dir")) overrides.push_back("run.dir=\"" + parsed.get("--run-dir") + "\"");
  auto config = runtime::load_run_config(parsed.get("--config"), overrides);
  runtime::configure_threads(config.threads.torch_intra_op);
  return config;
}

void write_resolved_config(const runtime::RunConfig& config) {
  std::filesystem::create_directories(config.run.dir);
  std::ofstream out(std::filesystem::path(config.run.dir) / "config.json");
  out << config.document.dump(2) << "\n";
}

model::CausalLM sft_from_scratch(const runtime::RunConfig& config, train::SftResult* result) {
  model::CausalLM policy(config.model);
  model::init_weights(*policy, static_cast<uint64_t>(config.run.seed));
  const auto run_dir = std::filesystem::path(config.run.dir);
  runtime::JsonlWriter metrics((run_dir / "sft_metrics.jsonl").string());
  *result = train::run_warm_start(policy, config, &metrics);
  model::save_policy_checkpoint((run_dir / "sft").string(), policy,
                                {{"tokenizer", "byte"},
                                 {"stage", "sft"},
                                 {"step", result->steps},
                                 {"policy_version", 0},
                                 {"run_config", config.document}});
  return policy;
}

void print_eval_result(const train::HeldoutResult& result, const std::string& checkpoint) {
  for (const auto& line : result.samples) std::printf("  %s\n", line.c_str());
  std::printf("held-out accuracy: %.4f (%lld/%lld correct, %.1f s)\n", result.accuracy,
              static_cast<long long>(result.correct), static_cast<long long>(result.total), result.seconds);
  const nlohmann::json line = {{"eval", true},
                               {"split", "test"},
                               {"checkpoint", checkpoint},
                               {"accuracy", result.accuracy},
                               {"correct", result.correct},
                               {"total", result.total},
                               {"seconds", result.seconds}};
  std::printf("%s\n", line.dump().c_str());
  std::fflush(stdout);
}

}  // namespace sao::cli
