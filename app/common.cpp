// Shared subcommand helpers; see common.hpp.
#include "app/common.hpp"

#include "algo/learner.hpp"
#include "base/json_parse.hpp"
#include "report/run_summary.hpp"
#include "train/memory_estimate.hpp"

#include "base/error.hpp"
#include "model/checkpoint.hpp"
#include "model/lora.hpp"
#include "report/system_info.hpp"

#include <nlohmann/json.hpp>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>

namespace sao::cli {

std::vector<FlagSpec> config_flags() {
  return {{"--config", true, false, "run config JSON (default: the embedded config/default.json)"},
          {"--model", true, false, "Hugging Face model directory (sets model.path; replaces the model section)"},
          {"--set", true, true, "override a config key, e.g. --set sft.steps=100 (repeatable)"},
          {"--run-dir", true, false, "run directory (default: run.dir from the config)"},
          {"--help", false, false, "show this help"}};
}

// A flag's value as a JSON string, never pasted between quotes: a backslash
// or "\u0041" in a directory name stays those characters.
std::string json_string(const std::string& flag, const std::string& value) {
  try {
    return base::dump_json(nlohmann::json(value));
  } catch (const nlohmann::json::type_error&) {
    throw Error(flag + " '" + value + "': the path must be valid UTF-8");
  }
}

config::RunConfig load_config_from_args(const ParsedArgs& parsed, const std::string& steps_key,
                                        const std::vector<std::string>& extra_overrides) {
  std::vector<std::string> overrides;
  // First, so that --set model.X can still be checked against the directory.
  if (parsed.has("--model"))
    overrides.push_back("model={\"path\": " + json_string("--model", parsed.get("--model")) + "}");
  for (const auto& assignment : parsed.all("--set")) overrides.push_back(assignment);
  if (!steps_key.empty() && parsed.has("--steps")) {
    overrides.push_back(steps_key + "=" + std::to_string(parsed.get_int("--steps", 0)));
  }
  if (parsed.has("--run-dir")) {
    overrides.push_back("run.dir=" + json_string("--run-dir", parsed.get("--run-dir")));
  }
  overrides.insert(overrides.end(), extra_overrides.begin(), extra_overrides.end());
  auto config = config::load_run_config(parsed.get("--config"), overrides);
  report::configure_threads(config.threads.torch_intra_op);
  return config;
}

void write_resolved_config(const config::RunConfig& config) {
  std::filesystem::create_directories(config.run.dir);
  std::ofstream out(std::filesystem::path(config.run.dir) / "config.json");
  out << base::dump_json(config.document, 2) << "\n";
}

model::CausalLM train_warm_start(const config::RunConfig& config, train::SftResult* result) {
  model::CausalLM policy{nullptr};
  if (config.model_path.empty()) {
    // LoRA adapters come after the warm start (prepare_training): SFT trains the whole model.
    auto base = config.model;
    base.lora = model::LoraConfig{};
    policy = model::CausalLM(base);
    model::init_weights(*policy, static_cast<uint64_t>(config.run.seed));
  } else {
    // A model brought by the user starts from its own weights.
    policy = model::load_policy_checkpoint(config.model_path);
    // The run may cap the context (model.max_position_embeddings).
    if (config.model.max_position_embeddings < policy->config().max_position_embeddings)
      policy = with_context(policy, config.model.max_position_embeddings);
  }
  const auto run_dir = std::filesystem::path(config.run.dir);
  report::JsonlWriter metrics((run_dir / "sft_metrics.jsonl").string());
  *result = train::run_warm_start(policy, config, &metrics);
  model::save_policy_checkpoint(model::sft_checkpoint_dir(config.run.dir), policy,
                                {{"tokenizer", config.model_path.empty() ? "byte" : config.model_path},
                                 {"stage", "sft"},
                                 {"step", result->steps},
                                 {"policy_version", 0},
                                 {"run_config", config.document}});
  return policy;
}

model::CausalLM with_context(const model::CausalLM& policy, int64_t max_positions) {
  auto config = policy->config();
  config.max_position_embeddings = max_positions;
  model::CausalLM result(config);
  torch::NoGradGuard no_grad;
  const auto source = policy->named_parameters();
  for (auto& parameter : result->named_parameters()) parameter.value().copy_(source[parameter.key()]);
  return result;
}

std::vector<FlagSpec> training_flags() {
  auto specs = config_flags();
  specs.push_back({"--steps", true, false, "override train.steps"});
  specs.push_back({"--resume", false, false, "continue from RUN_DIR/checkpoint (learner state included)"});
  return specs;
}

namespace {
// The warm start: the configured checkpoint, or RUN_DIR/sft (trained now if missing).
model::CausalLM warm_start_policy(const config::RunConfig& config, const std::string& command) {
  if (!config.train.init_checkpoint.empty()) return model::load_policy_checkpoint(config.train.init_checkpoint);
  const std::string sft_dir = model::sft_checkpoint_dir(config.run.dir);
  if (std::filesystem::exists(std::filesystem::path(sft_dir) / "model.safetensors")) {
    std::fprintf(stderr, "%s: warm start from %s\n", command.c_str(), sft_dir.c_str());
    return model::load_policy_checkpoint(sft_dir);
  }
  std::fprintf(stderr, "%s: no warm start at %s, running SFT first\n", command.c_str(), sft_dir.c_str());
  train::require_memory(train::estimate_sft_memory(config), train::available_memory_bytes(), config.source);
  train::SftResult result;
  auto policy = train_warm_start(config, &result);
  std::fprintf(stderr, "%s: SFT took %.1f s, saved %s\n", command.c_str(), result.seconds, sft_dir.c_str());
  return policy;
}

std::atomic<bool> g_stop_requested{false};

extern "C" void request_stop(int) {
  g_stop_requested.store(true);
}
}  // namespace

TrainingStart prepare_training(const ParsedArgs& parsed, const std::string& command) {
  TrainingStart start;
  start.config = load_config_from_args(parsed, "train.steps");
  auto& config = start.config;
  // Before anything is allocated: a run too large for the machine stops here with the estimate.
  train::require_memory(train::estimate_train_memory(config), train::available_memory_bytes(), config.source);
  write_resolved_config(config);
  if (!config.rollout.temperature_is_policy()) {
    std::fprintf(stderr,
                 "%s: WARNING: rollouts sample with temperature %.3g, top_k %lld, top_p %.3g; the recorded "
                 "log-probs are of that distribution, not the policy's own (so logprob_gap_lag0_max measures that "
                 "difference, not numerics)\n",
                 command.c_str(), config.rollout.temperature, static_cast<long long>(config.rollout.top_k),
                 config.rollout.top_p);
  }
  if (config.rollout.bf16_replica() && config.rollout.device == "cpu") {
    // Said because it is a surprise: on CPUs without bf16 matrix
    // instructions the replica decodes several times slower than fp32.
    std::fprintf(stderr,
                 "%s: note: rollouts decode a bf16 replica on the CPU; without bf16 matrix instructions that is "
                 "slower than fp32 (bench_model: 0.08-0.15x on an AVX2 EPYC); rollout.weights_dtype bf16 is meant "
                 "for GPUs\n",
                 command.c_str());
  }
  if (parsed.has("--resume")) {
    // A kill mid-swap is repaired and a corrupted checkpoint falls back to
    // the previous one (model/checkpoint.hpp), with the reason printed.
    std::string notice;
    const auto checkpoint = model::resolve_checkpoint(model::rl_checkpoint_dir(config.run.dir), &notice);
    if (!notice.empty()) std::fprintf(stderr, "%s: %s\n", command.c_str(), notice.c_str());
    start.policy = model::load_policy_checkpoint(model::checkpoint_policy_dir(checkpoint));
    start.resume_from = model::checkpoint_learner_dir(checkpoint);
    std::fprintf(stderr, "%s: resuming from %s (step %lld)\n", command.c_str(), checkpoint.c_str(),
                 static_cast<long long>(algo::read_learner_state(start.resume_from).step));
  } else {
    start.policy = warm_start_policy(config, command);
    if (config.model.lora.enabled() && !start.policy->config().lora.enabled()) {
      // LoRA trains adapters on the warm start's weights, which stay frozen.
      start.policy->attach_lora(config.model.lora);
      model::init_lora(start.policy, static_cast<uint64_t>(config.run.seed) ^ 0x4c6f5241ull);
      std::fprintf(stderr, "%s: LoRA r=%lld alpha=%g on %zu projections a layer: %lld trainable of %lld parameters\n",
                   command.c_str(), static_cast<long long>(config.model.lora.rank), config.model.lora.alpha,
                   config.model.lora.targets.size(),
                   static_cast<long long>(start.policy->config().trainable_parameter_count()),
                   static_cast<long long>(start.policy->config().parameter_count()));
    }
  }
  model::require_same_model(config.model, "the run config (" + config.source + ")", start.policy->config(),
                            parsed.has("--resume") ? "the checkpoint being resumed" : "the warm start");
  report::configure_threads(config.threads.train_intra_op);
  return start;
}

const std::atomic<bool>* install_stop_handlers() {
  std::signal(SIGINT, request_stop);
  std::signal(SIGTERM, request_stop);
  return &g_stop_requested;
}

int report_training_outcome(const actors::TrainOutcome& outcome, const config::RunConfig& config,
                            const std::string& command, double wall_s) {
  std::printf("%s: finished (%s) after %lld learner steps, policy version %lld\n", command.c_str(),
              outcome.reason.c_str(), static_cast<long long>(outcome.steps),
              static_cast<long long>(outcome.policy_version));
  if (!outcome.summary_json.empty()) {
    // A few lines for a person; every number stays in summary.json.
    const auto summary = nlohmann::json::parse(outcome.summary_json, nullptr, /*allow_exceptions=*/false);
    if (summary.is_object()) {
      std::printf("%s", report::describe_run_summary(summary, config.run.dir, wall_s).c_str());
    } else {
      std::printf("%s\n", outcome.summary_json.c_str());
    }
  }
  if (outcome.actors_left_running != 0) {
    std::fprintf(stderr, "%s: %lld actors still running at exit\n", command.c_str(),
                 static_cast<long long>(outcome.actors_left_running));
    return 4;
  }
  return outcome.failed ? 1 : 0;
}

void print_eval_result(const train::HeldoutResult& result, const std::string& checkpoint) {
  for (const auto& line : result.samples) std::printf("  %s\n", line.c_str());
  std::printf("held-out accuracy: %.4f (%lld/%lld correct, %.1f s)%s\n", result.accuracy,
              static_cast<long long>(result.correct), static_cast<long long>(result.total - result.errors),
              result.seconds, report::heldout_errors_note(result.errors, result.total).c_str());
  nlohmann::json line = {{"eval", true},
                         {"split", "test"},
                         {"checkpoint", checkpoint},
                         {"heldout_accuracy", result.accuracy},
                         {"correct", result.correct},
                         {"total", result.total},
                         {"errors", result.errors},
                         {"seconds", result.seconds}};
  report::add_counts(line, result.counts);
  const auto counts = report::counts_of_eval_line(line);
  for (const auto& [name, value] : counts.items()) {
    std::printf("%s: %s of %lld\n", name.c_str(), base::dump_json(value).c_str(), static_cast<long long>(result.total));
  }
  std::printf("%s\n", base::dump_json(line).c_str());
  std::fflush(stdout);
}

}  // namespace sao::cli
