// Pieces shared by the subcommands that load a run config.
#pragma once

#include "actors/train.hpp"
#include "app/args.hpp"
#include "config/run_config.hpp"
#include "model/transformer.hpp"
#include "train/task_runner.hpp"

#include <atomic>
#include <string>
#include <vector>

namespace sao::cli {

// --config, --set (repeatable), --run-dir, --help.
std::vector<FlagSpec> config_flags();
// Loads the config named by --config (embedded default without it), applies
// --set overrides and --run-dir, and configures threads.
// `steps_key`, when given, is the config key a `--steps N` flag sets; the
// flag goes in as an override, so it is validated like the key itself.
// `extra_overrides` (a command's own flags, as key=value) apply last.
config::RunConfig load_config_from_args(const ParsedArgs& parsed, const std::string& steps_key = "",
                                        const std::vector<std::string>& extra_overrides = {});
// `value` as a JSON string literal for an override; throws sao::Error naming
// `flag` when it is not valid UTF-8.
std::string json_string(const std::string& flag, const std::string& value);
// Writes the resolved config into the run directory.
void write_resolved_config(const config::RunConfig& config);
// Trains a policy on the task's demonstrations (SFT) and saves it to
// RUN_DIR/sft; metrics go to RUN_DIR/sft_metrics.jsonl. The policy starts
// from model.path's weights when the config names a model directory, else
// from a seeded random initialisation.
model::CausalLM train_warm_start(const config::RunConfig& config, train::SftResult* result);
// The same weights in a model whose context is `max_positions` (a run's cap
// of a brought model's context, or the directory's own context on export).
model::CausalLM with_context(const model::CausalLM& policy, int64_t max_positions);
// config_flags() plus --steps and --resume: what `train` and a learner node take.
std::vector<FlagSpec> training_flags();
// What an RL run starts from.
struct TrainingStart {
  config::RunConfig config;
  model::CausalLM policy{nullptr};
  std::string resume_from;  // learner checkpoint dir ("" = fresh)
};
// Loads the config (writing the resolved one into the run dir), then the
// policy: RUN_DIR/checkpoint with --resume, else the warm start (the
// configured checkpoint, or RUN_DIR/sft, trained first if missing).
TrainingStart prepare_training(const ParsedArgs& parsed, const std::string& command);
// SIGINT/SIGTERM set the returned flag instead of killing the process, so a
// run ends with its final evaluation and checkpoint.
const std::atomic<bool>* install_stop_handlers();
// Prints how an RL run ended (a short summary for a person; the numbers are
// in summary.json) and returns the process exit code. `wall_s`: the
// command's wall time so far.
int report_training_outcome(const actors::TrainOutcome& outcome, const config::RunConfig& config,
                            const std::string& command, double wall_s);
// Prints the human line and one JSON line for an evaluation.
void print_eval_result(const train::HeldoutResult& result, const std::string& checkpoint);

}  // namespace sao::cli
