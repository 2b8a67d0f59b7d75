// Pieces shared by the subcommands that load a run config.
#pragma once

#include "cli/args.hpp"
#include "model/transformer.hpp"
#include "runtime/run_config.hpp"
#include "train/task_runner.hpp"

#include <string>
#include <vector>

namespace sao::cli {

// --config, --set (repeatable), --run-dir, --help.
std::vector<FlagSpec> config_flags();
// Loads the config named by --config (embedded default without it), applies
// --set overrides and --run-dir, and configures threads.
runtime::RunConfig load_config_from_args(const ParsedArgs& parsed);
// Writes the resolved config into the run directory.
void write_resolved_config(const runtime::RunConfig& config);
// Trains a fresh policy on the task's demonstrations (SFT) and saves it to
// RUN_DIR/sft; metrics go to RUN_DIR/sft_metrics.jsonl.
model::CausalLM sft_from_scratch(const runtime::RunConfig& config, train::SftResult* result);
// Prints the human line and one JSON line for an evaluation.
void print_eval_result(const train::HeldoutResult& result, const std::string& checkpoint);

}  // namespace sao::cli
