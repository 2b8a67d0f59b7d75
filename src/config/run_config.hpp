// The run configuration: one JSON document with a section per subsystem.
// Loading is strict (unknown keys and wrong types are errors that name the
// key and the file), `--set a.b=c` overrides apply before validation, and the
// resolved document is written into the run directory so every run records
// exactly what it ran with.
#pragma once

#include "algo/learner_config.hpp"
#include "base/json_reader.hpp"
#include "env/latency.hpp"
#include "model/decode_engine.hpp"
#include "model/generation.hpp"
#include "model/model_config.hpp"
#include "replay/replay_buffer.hpp"
#include "rollout/episode_engine.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace sao::config {

// Ranges the config reader and the live knobs (live_knobs.hpp) share.
inline constexpr base::IntRange kBatchRange{1, 1 << 20};
inline constexpr base::IntRange kStalenessRange{-1, 100000000};  // -1: never drop

struct RunSection {
  std::string name = "default";
  int64_t seed = 1;
  std::string dir = "runs/default";
};

struct ThreadsSection {
  // LibTorch and OpenBLAS threads for sft/eval. 1 by default: measured here,
  // the default model trains at ~10k tokens/s on 1 thread, and 2 threads
  // collapse to a few hundred tokens/s whenever anything else runs (OpenBLAS
  // workers spin-wait for a core that is busy).
  int64_t torch_intra_op = 1;
  // ... for `sao train`, where the learner and every rollout actor compute on
  // threads of their own: more than one each oversubscribes 2 cores, and
  // OpenBLAS's spinning workers then cost far more than they give.
  int64_t train_intra_op = 1;
};

// One phase of a warm-start curriculum: a fraction of sft.steps whose
// demonstrations come from the run's task section with `task` merged over it.
// A fraction rather than a step count, so that `--set sft.steps=N` (a smoke
// test, a longer warm start) scales the phases with it.
struct SftPhase {
  double fraction = 0.0;
  nlohmann::json task = nlohmann::json::object();
};

struct SftSection {
  // Demonstrations from a JSON-lines file (env/tasks/data_file.hpp) for any task;
  // "" uses the environment's own demonstrations.
  std::string data;
  // Phases run first, in order, within `steps`; the steps after them use the
  // run's task as it is. A skill the mixed demonstrations teach only on some
  // seeds (arithmetic's worked answers at rate 0.5) is learnt reliably when a
  // phase shows it alone first (docs/decisions.md). One learning-rate
  // schedule and one optimiser span every phase.
  std::vector<SftPhase> curriculum;
  int64_t steps = 1200;
  int64_t batch_size = 64;
  double learning_rate = 2e-3;
  int64_t warmup_steps = 20;
  double weight_decay = 0.01;
  double grad_clip = 1.0;
  int64_t log_every = 25;
  std::string device = "cpu";  // where `sao sft` trains and evaluates: "cpu", "cuda", "cuda:N"
};

struct EvalSection {
  double temperature = 0.0;    // greedy held-out accuracy by default
  int64_t max_new_tokens = 0;  // per turn; 0: rollout.max_new_tokens (RunConfig::eval_max_new_tokens)
  int64_t batch_size = 200;
};

// How rollout actors sample and talk to environments.
struct RolloutSection {
  int64_t num_actors = 1;  // rollout actors (each owns a policy replica)
  int64_t env_actors = 1;  // env actors; rollout i uses env i % env_actors
  // Episodes in flight per rollout actor: when one ends (or is lost) its
  // slot takes the next prompt at once (continuous batching). In sync mode
  // a round is `slots` episodes per actor at one weight version.
  int64_t slots = 32;
  // The paged KV cache of each rollout actor: its pool holds this many
  // tokens (0: slots x model.max_position_embeddings, so nothing ever
  // waits); storage grows with the blocks in use, up to that. When the
  // pool is full, new prompts wait for blocks.
  int64_t kv_cache_tokens = 0;
  // Tokens per block: small, because a block holds up to block - 1 tokens
  // nobody uses, and the gather costs the same at any size (measured:
  // docs/results.md "Rollout engine").
  int64_t kv_block_size = 4;
  // Prompt and observation tokens prefilled per decode step, across
  // sequences; a longer input is chunked over several steps.
  int64_t prefill_chunk_tokens = 1024;
  int64_t max_new_tokens = 8;  // per turn
  int64_t max_turns = 1;       // an episode reaching it is truncated
  double temperature = 1.0;    // anything but 1/0/1 makes the recorded log-probs a different distribution
  int64_t top_k = 0;
  double top_p = 1.0;
  std::string weight_switch = "in_flight";  // "in_flight" (between decode steps) | "turn_boundary"
  int64_t env_timeout_ms = 5000;            // a reset/step slower than this loses the episode
  std::string device = "cpu";               // where each rollout actor decodes: "cpu", "cuda", "cuda:N"
  // The rollout's copy of the policy: "fp32", or "bf16" (a replica whose
  // weights are converted once per version, not cast at every step; its
  // KV cache is bf16 too; log-probs stay fp32).
  std::string weights_dtype = "fp32";
  // Staleness stress for experiments: rollouts run the policy this many
  // versions behind the learner's newest (0 in real runs; see weight_sync_actor.hpp).
  int64_t weight_delay_versions = 0;
  bool temperature_is_policy() const { return temperature == 1.0 && top_k == 0 && top_p >= 1.0; }
  // The KV pool's capacity in tokens (kv_cache_tokens, or its default for
  // a model whose context holds `max_positions`).
  int64_t kv_pool_tokens(int64_t max_positions) const {
    return kv_cache_tokens > 0 ? kv_cache_tokens : slots * max_positions;
  }
  // The decode engine's limits, and the episodes' sampling and turns, that
  // these keys give a rollout of a model whose context holds `max_positions`.
  model::EngineLimits engine_limits(int64_t max_positions) const;
  rollout::EpisodeSettings episode_settings() const;
  // weight_switch as a value: in_flight (between decode steps) or
  // turn_boundary (once no turn is running). Throws sao::Error for any other.
  enum class WeightSwitch { kInFlight, kTurnBoundary };
  WeightSwitch weight_switch_mode() const;
  // weights_dtype as a value; throws sao::Error for anything but fp32/bf16.
  bool bf16_replica() const;
};

// Which environment the env actors run. Its config is the "task" section,
// so the built-in arithmetic environment and held-out evaluation share it.
struct EnvSection {
  std::string name = "arithmetic";  // a name in the environment registry
  // A shared library of C++ environments (env/env_plugin.hpp), loaded when
  // the config is parsed, so `name` may be one it registers. Every process
  // that parses the config loads it (an env node of a cluster too).
  std::string plugin;
  // Simulated latency of every reset and step (keys latency, latency_ms,
  // latency_sigma, latency_max_ms; env/latency.hpp): what a tool call or a
  // sandbox would cost, so the asynchronous speed-up can be measured.
  env::LatencyModel latency;
};

struct TrainSection {
  std::string mode = "async";      // "async" (SAO, GRPO-async) | "sync" (batch barrier)
  int64_t steps = 600;             // learner steps in the run
  int64_t eval_every = 25;         // held-out evaluation every N learner steps (0: start and end only)
  int64_t checkpoint_every = 100;  // 0: only the final checkpoint
  std::string init_checkpoint;     // policy to start from; empty: RUN_DIR/sft, trained first if missing
  int64_t scheduler_threads = 2;   // CAF worker threads for the light actors
  // CAF scheduler policy for those workers: "sharing" (idle workers block on
  // one queue) or "stealing" (idle workers poll and sleep in short steps).
  // Sharing by default: stealing's polling took 11.7% of the process CPU and
  // cost 11% of steps/s on 2 cores (bench/runtime_share.sh, docs/decisions.md).
  std::string scheduler_policy = "sharing";
  // Supervision: an env or rollout actor that fails this many times within
  // failure_window_s ends the run (with its first error) instead of being
  // restarted again; and this many episodes lost in a row with no learner
  // step between them end it too (an environment that errors on every
  // episode never crashes its actor). 0 disables the second check.
  int64_t max_actor_failures = 3;
  int64_t failure_window_s = 60;
  int64_t max_lost_in_a_row = 200;
  // This many environment calls failing in a row (no success between them)
  // declare the environment dead (env/failure_streak.hpp): a held-out
  // evaluation or an env actor stops calling it and the run ends. 0: never.
  int64_t max_env_failures_in_a_row = 5;
};

// The introspection console's HTTP endpoint (dashboard, JSON API,
// Prometheus). Loopback only unless `listen` names another address; control
// commands need the token written to RUN_DIR/console.json at start.
struct ConsoleSection {
  bool enabled = true;
  std::string listen = "127.0.0.1";
  int64_t port = 8470;  // taken: falls back to a free port (printed, and in RUN_DIR/console.json)
};

// The agent endpoint (actors/agent/): agents that run their own loop call
// an OpenAI-compatible chat API, and their sessions are the run's episodes
// in place of an environment's. Off by default; the bearer token is written
// to RUN_DIR/agent.json at start.
struct AgentSection {
  bool endpoint = false;
  std::string listen = "127.0.0.1";
  int64_t port = 8471;  // taken: falls back to a free port (printed, and in RUN_DIR/agent.json)
  // A session neither calling nor rewarding for this long is abandoned (its episode counted lost).
  int64_t session_timeout_s = 300;
  // A new session waits this long for a free rollout slot (then 503).
  int64_t queue_timeout_s = 120;
  int64_t max_sessions = 256;                // open or queued at once (503 beyond)
  int64_t max_body_bytes = 4 * 1024 * 1024;  // a larger request gets 413
  std::string model_name;                    // what /v1/models and replies call the model; "" = the run's
};

struct RunConfig {
  // The default run's choices where they differ from the bare sections'
  // defaults (ArithmeticConfig{} is a plain-answer teacher, SftSection{} has
  // no curriculum); RunConfig{} is config/default.json.
  RunConfig();
  std::string source;  // where it came from, for error messages
  // Sections that a --set changed, with the origin their errors name
  // (config_sources); a section absent here came from `source`.
  std::map<std::string, std::string> section_sources;
  // The origin of a top-level section for messages: "run.json.task", or
  // "--set task.verifer=x: task" when a --set changed it.
  std::string where(const std::string& section) const;
  RunSection run;
  ThreadsSection threads;
  model::ModelConfig model;
  // "model.path": a Hugging Face model directory. When set, the architecture
  // is its config.json, the tokenizer its tokenizer.json, and the warm start
  // begins from its weights; "" means sao's own byte-level model.
  std::string model_path;
  // "model.prompt_format": "auto" (the model's chat template when it has
  // one), "chat" (its template, required) or "plain" (BOS + text, EOS).
  std::string prompt_format = "auto";
  // The "task" section: the environment's config, read by its factory
  // (env::make_environment), whichever environment it is.
  nlohmann::json task_document;
  SftSection sft;
  EvalSection eval;
  RolloutSection rollout;
  // New tokens a held-out answer may take: eval.max_new_tokens, or when that
  // is 0 the rollout's own limit.
  int64_t eval_max_new_tokens() const { return eval.max_new_tokens > 0 ? eval.max_new_tokens : rollout.max_new_tokens; }
  EnvSection env;
  TrainSection train;
  ConsoleSection console;
  AgentSection agent;
  replay::ReplayConfig replay;
  algo::LearnerConfig learner;
  nlohmann::json document;  // the resolved JSON, as written to the run directory
};

// The task section curriculum phase `phase` trains on: the run's task
// section with the phase's keys merged over it (JSON merge patch).
nlohmann::json sft_phase_task(const RunConfig& config, size_t phase);
// The first step after curriculum phase `phase` (0-based, exclusive): the
// phases' fractions summed up to it, times sft.steps, rounded to the nearest
// step; sft.steps for phase curriculum.size() (the run's own task).
int64_t sft_phase_end(const SftSection& options, size_t phase);
// The curriculum phase SFT step `step` (0-based) belongs to;
// options.curriculum.size() for the steps after every phase.
size_t sft_phase_of_step(const SftSection& options, int64_t step);

// The config compiled into the binary (config/default.json).
nlohmann::json default_config_document();
// Reads a JSON file; errors name the file and, for parse errors, the byte.
nlohmann::json read_json_file(const std::string& path);
// Applies "a.b.c=value" (value parsed as JSON, else taken as a string).
// Throws sao::Error naming the override when the path is malformed.
void apply_override(nlohmann::json& document, const std::string& assignment);
// Parses and validates every section. `source` names the origin in errors;
// `section_sources` the sections a --set changed (config_sources).
RunConfig parse_run_config(const nlohmann::json& document, const std::string& source,
                           const std::map<std::string, std::string>& section_sources = {});
// The top-level section an override assigns: "task" for "task.train=x" and
// for "task={...}".
std::string override_section(const std::string& assignment);
// For each section the overrides change, the origin its errors name: the
// --set assignments, after "FILE and " when the file gives the section too.
std::map<std::string, std::string> config_sources(const nlohmann::json& file_overlay, const std::string& file,
                                                  const std::vector<std::string>& overrides);
// Makes the data paths of `document` (task.train, task.heldout, sft.data)
// absolute against `base`: a config file's folder for the paths it names,
// the working directory for --set's. Other values are left for the readers
// to check and report.
void resolve_data_paths(nlohmann::json& document, const std::filesystem::path& base);
// Every key parse_run_config reads, with this config's values; parsing the
// result gives the same settings back. Applied to RunConfig{} it is the code's
// defaults, which tests/test_config.cpp holds equal to config/default.json.
nlohmann::json run_config_to_json(const RunConfig& config);
// The embedded default with `file` (if not empty) merged over it, then the
// overrides.
RunConfig load_run_config(const std::string& file, const std::vector<std::string>& overrides);

}  // namespace sao::config
