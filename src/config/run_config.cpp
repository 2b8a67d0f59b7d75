// Strict loading of run configs; see run_config.hpp.
#include "config/run_config.hpp"

#include "base/error.hpp"
#include "base/json_parse.hpp"
#include "base/json_reader.hpp"
#include "env/arithmetic_env.hpp"
#include "env/environment.hpp"
#include "env/plugin_loader.hpp"
#include "model/checkpoint.hpp"
#include "model/device.hpp"
#include "sao/build_info.hpp"
#include "tokenizer/byte_tokenizer.hpp"
#include "tokenizer/load_tokenizer.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace sao::config {

using base::JsonReader;

RunConfig::RunConfig() {
  // A task RL can be seen to teach in a few minutes on 2 cores (issue #18):
  // the teacher shows its work ("19+23=" -> "w24>42") on 30% of problems, so
  // the warm start mostly answers plainly (~35% right) though it knows a
  // form it gets right far more often; reward alone moves it there. The
  // first two thirds of SFT show only worked answers, which is what makes
  // the warm start learn that form on every seed (docs/decisions.md, "A
  // curriculum that teaches the worked form").
  task.demonstration_worked_rate = 0.3;
  sft.curriculum = {SftPhase{0.667, {{"demonstration_worked_rate", 1.0}}}};
  // The longest worked answer, "w891>198", and EOS.
  eval.max_new_tokens = 10;
  rollout.max_new_tokens = 10;
  train.steps = 300;
}

nlohmann::json sft_phase_task(const RunConfig& config, size_t phase) {
  if (phase >= config.sft.curriculum.size()) {
    throw Error("sft_phase_task: phase " + std::to_string(phase) + " of a curriculum of " +
                std::to_string(config.sft.curriculum.size()));
  }
  auto task = config.task_document;
  task.merge_patch(config.sft.curriculum[phase].task);
  return task;
}

int64_t sft_phase_end(const SftSection& options, size_t phase) {
  if (phase >= options.curriculum.size()) return options.steps;
  double fraction = 0.0;
  for (size_t i = 0; i <= phase; ++i) fraction += options.curriculum[i].fraction;
  return std::min(options.steps, static_cast<int64_t>(std::llround(fraction * static_cast<double>(options.steps))));
}

size_t sft_phase_of_step(const SftSection& options, int64_t step) {
  for (size_t i = 0; i < options.curriculum.size(); ++i) {
    if (step < sft_phase_end(options, i)) return i;
  }
  return options.curriculum.size();
}

nlohmann::json default_config_document() {
  return nlohmann::json::parse(build_info::kDefaultConfigJson);
}

nlohmann::json read_json_file(const std::string& path) {
  std::error_code status_error;
  const auto status = std::filesystem::status(path, status_error);
  if (status_error || !std::filesystem::exists(status)) throw Error("config " + path + ": cannot open file");
  // Opening a FIFO would block until a writer comes; a config is a file.
  if (!std::filesystem::is_regular_file(status)) {
    throw Error("config " + path + ": not a regular file (a FIFO, device or directory cannot be a config)");
  }
  std::ifstream in(path);
  if (!in) throw Error("config " + path + ": cannot open file");
  std::stringstream text;
  text << in.rdbuf();
  return base::parse_json_limited(text.str(), "config " + path);
}

void apply_override(nlohmann::json& document, const std::string& assignment) {
  const auto equals = assignment.find('=');
  if (equals == std::string::npos || equals == 0) {
    throw Error("--set '" + assignment + "': expected key.path=value, e.g. sft.steps=100");
  }
  const std::string path = assignment.substr(0, equals);
  const std::string text = assignment.substr(equals + 1);
  nlohmann::json value;
  try {
    value = base::parse_json_limited(text, "--set " + path);
  } catch (const Error&) {
    value = text;  // bare words are strings: --set run.name=exp1
  }
  nlohmann::json* node = &document;
  std::stringstream parts(path);
  std::string part;
  std::vector<std::string> keys;
  while (std::getline(parts, part, '.')) keys.push_back(part);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i].empty()) throw Error("--set '" + assignment + "': empty key segment in '" + path + "'");
    if (!node->is_object()) throw Error("--set '" + assignment + "': '" + keys[i - 1] + "' is not a section");
    node = &(*node)[keys[i]];
  }
  *node = value;
}

namespace {

// Each section's keys, listed once: read_* reads them (base::ReadKeys) and
// run_config_to_json writes them (base::WriteKeys).
template <typename Run, typename Visit>
void run_keys(Run& run, Visit visit) {
  visit("name", run.name);
  visit("seed", run.seed);
  visit("dir", run.dir);
}

template <typename Threads, typename Visit>
void threads_keys(Threads& threads, Visit visit) {
  visit("torch_intra_op", threads.torch_intra_op);
  visit("train_intra_op", threads.train_intra_op);
}

template <typename Sft, typename Visit>
void sft_keys(Sft& sft, Visit visit) {
  visit("data", sft.data);
  visit("steps", sft.steps);
  visit("batch_size", sft.batch_size);
  visit("learning_rate", sft.learning_rate);
  visit("warmup_steps", sft.warmup_steps);
  visit("weight_decay", sft.weight_decay);
  visit("grad_clip", sft.grad_clip);
  visit("log_every", sft.log_every);
  visit("device", sft.device);
}

template <typename Eval, typename Visit>
void eval_keys(Eval& eval, Visit visit) {
  visit("temperature", eval.temperature);
  visit("max_new_tokens", eval.max_new_tokens);
  visit("batch_size", eval.batch_size);
}

template <typename Rollout, typename Visit>
void rollout_keys(Rollout& rollout, Visit visit) {
  visit("num_actors", rollout.num_actors);
  visit("env_actors", rollout.env_actors);
  visit("episodes_per_actor", rollout.episodes_per_actor);
  visit("max_new_tokens", rollout.max_new_tokens);
  visit("max_turns", rollout.max_turns);
  visit("temperature", rollout.temperature);
  visit("top_k", rollout.top_k);
  visit("top_p", rollout.top_p);
  visit("weight_switch", rollout.weight_switch);
  visit("env_timeout_ms", rollout.env_timeout_ms);
  visit("device", rollout.device);
  visit("bf16_autocast", rollout.bf16_autocast);
  visit("weight_delay_versions", rollout.weight_delay_versions);
}

template <typename Train, typename Visit>
void train_keys(Train& train, Visit visit) {
  visit("mode", train.mode);
  visit("steps", train.steps);
  visit("eval_every", train.eval_every);
  visit("checkpoint_every", train.checkpoint_every);
  visit("init_checkpoint", train.init_checkpoint);
  visit("scheduler_threads", train.scheduler_threads);
  visit("scheduler_policy", train.scheduler_policy);
  visit("max_actor_failures", train.max_actor_failures);
  visit("failure_window_s", train.failure_window_s);
  visit("max_lost_in_a_row", train.max_lost_in_a_row);
  visit("max_env_failures_in_a_row", train.max_env_failures_in_a_row);
}

template <typename Console, typename Visit>
void console_keys(Console& console, Visit visit) {
  visit("enabled", console.enabled);
  visit("listen", console.listen);
  visit("port", console.port);
}

template <typename Env, typename Visit>
void env_keys(Env& env, Visit visit) {
  visit("name", env.name);
  visit("plugin", env.plugin);
  visit("latency", env.latency.distribution);
  visit("latency_ms", env.latency.mean_ms);
  visit("latency_sigma", env.latency.sigma);
  visit("latency_max_ms", env.latency.max_ms);
}

// group_size and synchronous are not keys: derive_dependent_settings sets them.
template <typename Replay, typename Visit>
void replay_keys(Replay& replay, Visit visit) {
  visit("min_batch", replay.min_batch);
  visit("max_batch", replay.max_batch);
  visit("max_staleness", replay.max_staleness);
  visit("capacity", replay.capacity);
}

// Every integer key has a range: a value outside it would wrap through a
// narrower conversion (4294967297 threads became 1), allocate without
// bound, or never finish. The message names the key, the range and the value.
void require_range(const std::string& where, const char* key, int64_t value, int64_t low, int64_t high) {
  if (value < low || value > high) {
    throw Error(where + "." + key + ": must be in [" + std::to_string(low) + ", " + std::to_string(high) + "], got " +
                std::to_string(value));
  }
}

constexpr int64_t kMaxThreads = 256;
constexpr int64_t kMaxActors = 1024;
constexpr int64_t kMaxSteps = 100000000;
constexpr int64_t kMaxBatch = 1 << 20;
constexpr int64_t kMaxTokens = 1 << 16;

void read_run(JsonReader reader, RunSection& run) {
  run_keys(run, base::ReadKeys{reader});
  reader.reject_unknown_keys();
  if (run.dir.empty()) throw Error(reader.where() + ".dir: must not be empty");
}

void read_threads(JsonReader reader, ThreadsSection& threads) {
  threads_keys(threads, base::ReadKeys{reader});
  reader.reject_unknown_keys();
  require_range(reader.where(), "torch_intra_op", threads.torch_intra_op, 1, kMaxThreads);
  require_range(reader.where(), "train_intra_op", threads.train_intra_op, 1, kMaxThreads);
}

// The phases' shapes and step counts; their task keys are checked against
// the environment in check_sft_curriculum_tasks, once the task is known.
void read_sft_curriculum(const std::string& where, const nlohmann::json& curriculum, SftSection& sft) {
  const char* shape = R"(an array of phases {"fraction": F, "task": {...}})";
  if (!curriculum.is_array()) {
    throw Error(where + ".curriculum: expected " + shape + ", got " + std::string(curriculum.type_name()));
  }
  sft.curriculum.clear();
  double total = 0.0;
  for (size_t i = 0; i < curriculum.size(); ++i) {
    const std::string phase_where = where + ".curriculum[" + std::to_string(i) + "]";
    if (!curriculum[i].is_object()) {
      throw Error(phase_where + ": expected a phase {\"fraction\": F, \"task\": {...}}, got " +
                  std::string(curriculum[i].type_name()));
    }
    JsonReader phase_reader(curriculum[i], phase_where);
    SftPhase phase;
    if (!curriculum[i].contains("fraction")) {
      throw Error(phase_where + ".fraction: missing (the share of sft.steps the phase runs, in (0, 1])");
    }
    phase_reader.read("fraction", phase.fraction);
    phase_reader.read("task", phase.task);
    phase_reader.reject_unknown_keys();
    if (!(phase.fraction > 0.0 && phase.fraction <= 1.0)) {
      throw Error(phase_where + ".fraction: must be in (0, 1], got " + base::dump_json(curriculum[i]["fraction"]));
    }
    if (!phase.task.is_object()) {
      throw Error(phase_where + ".task: expected an object of task keys, got " + std::string(phase.task.type_name()));
    }
    total += phase.fraction;
    sft.curriculum.push_back(std::move(phase));
  }
  // A little slack, so that thirds written as 0.3333 add up.
  if (total > 1.0 + 1e-6) {
    std::ostringstream sum;
    sum << total;
    throw Error(where + ".curriculum: its phases' fractions add up to " + sum.str() +
                ", more than 1 (the whole of sft.steps)");
  }
  if (!sft.curriculum.empty() && !sft.data.empty()) {
    throw Error(where + ".curriculum: phases change the task's own demonstrations, but " + where + ".data ('" +
                sft.data + "') replaces them with a file; set one of the two");
  }
}

void read_sft(JsonReader reader, SftSection& sft) {
  sft_keys(sft, base::ReadKeys{reader});
  nlohmann::json curriculum = nlohmann::json::array();
  // Absent means none, not the default run's: a config written before
  // curricula existed (a checkpoint's stored run config) ran without one.
  reader.read("curriculum", curriculum);
  reader.reject_unknown_keys();
  const auto& where = reader.where();
  require_range(where, "steps", sft.steps, 0, kMaxSteps);
  require_range(where, "batch_size", sft.batch_size, 1, kMaxBatch);
  if (!(sft.learning_rate > 0)) throw Error(where + ".learning_rate: must be > 0");
  require_range(where, "warmup_steps", sft.warmup_steps, 0, kMaxSteps);
  if (sft.weight_decay < 0) throw Error(where + ".weight_decay: must be >= 0");
  if (!(sft.grad_clip > 0)) throw Error(where + ".grad_clip: must be > 0");
  require_range(where, "log_every", sft.log_every, 1, kMaxSteps);
  model::parse_device(sft.device, where + ".device");
  read_sft_curriculum(where, curriculum, sft);
}

void read_eval(JsonReader reader, EvalSection& eval) {
  eval_keys(eval, base::ReadKeys{reader});
  reader.reject_unknown_keys();
  if (eval.temperature < 0) throw Error(reader.where() + ".temperature: must be >= 0 (0 = greedy)");
  require_range(reader.where(), "max_new_tokens", eval.max_new_tokens, 1, kMaxTokens);
  require_range(reader.where(), "batch_size", eval.batch_size, 1, kMaxBatch);
  if (eval.batch_size < 1) throw Error(reader.where() + ".batch_size: must be >= 1");
}

void read_rollout(JsonReader reader, RolloutSection& rollout) {
  rollout_keys(rollout, base::ReadKeys{reader});
  reader.reject_unknown_keys();
  const auto& where = reader.where();
  require_range(where, "num_actors", rollout.num_actors, 1, kMaxActors);
  require_range(where, "env_actors", rollout.env_actors, 1, kMaxActors);
  require_range(where, "episodes_per_actor", rollout.episodes_per_actor, 1, kMaxBatch);
  require_range(where, "max_new_tokens", rollout.max_new_tokens, 1, kMaxTokens);
  require_range(where, "max_turns", rollout.max_turns, 1, 100000);
  require_range(where, "top_k", rollout.top_k, 0, 1 << 24);
  require_range(where, "env_timeout_ms", rollout.env_timeout_ms, 1, 3600000);
  require_range(where, "weight_delay_versions", rollout.weight_delay_versions, 0, 4096);
  model::parse_device(rollout.device, where + ".device");
  if (rollout.weight_switch != "in_flight" && rollout.weight_switch != "turn_boundary") {
    throw Error(where + ".weight_switch: expected \"in_flight\" or \"turn_boundary\", got \"" + rollout.weight_switch +
                "\"");
  }
  model::SamplingConfig sampling;
  sampling.temperature = rollout.temperature;
  sampling.top_k = rollout.top_k;
  sampling.top_p = rollout.top_p;
  sampling.max_new_tokens = rollout.max_new_tokens;
  sampling.validate(where);
}

void read_train(JsonReader reader, TrainSection& train) {
  train_keys(train, base::ReadKeys{reader});
  reader.reject_unknown_keys();
  const auto& where = reader.where();
  if (train.mode != "async" && train.mode != "sync") {
    throw Error(where + ".mode: expected \"async\" or \"sync\", got \"" + train.mode + "\"");
  }
  require_range(where, "steps", train.steps, 0, kMaxSteps);
  require_range(where, "eval_every", train.eval_every, 0, kMaxSteps);
  require_range(where, "checkpoint_every", train.checkpoint_every, 0, kMaxSteps);
  require_range(where, "scheduler_threads", train.scheduler_threads, 1, kMaxThreads);
  require_range(where, "max_actor_failures", train.max_actor_failures, 1, 1000000);
  require_range(where, "failure_window_s", train.failure_window_s, 1, 86400);
  require_range(where, "max_lost_in_a_row", train.max_lost_in_a_row, 0, kMaxSteps);  // 0: no limit
  require_range(where, "max_env_failures_in_a_row", train.max_env_failures_in_a_row, 0, 1000000);  // 0: never
  if (train.scheduler_policy != "stealing" && train.scheduler_policy != "sharing") {
    throw Error(where + ".scheduler_policy: expected \"stealing\" or \"sharing\", got \"" + train.scheduler_policy +
                "\"");
  }
}

void read_console(JsonReader reader, ConsoleSection& console) {
  console_keys(console, base::ReadKeys{reader});
  reader.reject_unknown_keys();
  if (console.listen.empty()) throw Error(reader.where() + ".listen: must be an address such as 127.0.0.1");
  if (console.port < 0 || console.port > 65535)
    throw Error(reader.where() + ".port: must be in 0..65535 (0: any free port)");
}

void read_env(JsonReader reader, EnvSection& env) {
  env_keys(env, base::ReadKeys{reader});
  reader.reject_unknown_keys();
  if (env.name.empty()) throw Error(reader.where() + ".name: must name a registered environment");
  env.latency.validate(reader.where());
}

void read_replay(JsonReader reader, replay::ReplayConfig& replay) {
  replay_keys(replay, base::ReadKeys{reader});
  reader.reject_unknown_keys();
  const auto& where = reader.where();
  require_range(where, "min_batch", replay.min_batch, 1, kMaxBatch);
  require_range(where, "max_batch", replay.max_batch, 1, kMaxBatch);
  require_range(where, "max_staleness", replay.max_staleness, -1, kMaxSteps);  // -1: never drop
  require_range(where, "capacity", replay.capacity, 1, 1 << 24);
}

// Settings that follow from others: GRPO groups flow through rollout and
// replay as units, and a synchronous run hands the learner exactly one
// generation round (every rollout actor's batch) of a single version.
// Each phase's task, merged, must be a task the environment accepts; the
// error names the phase (a key misspelt there would otherwise surface only
// when SFT reaches it, or never, if the environment ignored it).
void check_sft_curriculum_tasks(const RunConfig& config) {
  for (size_t i = 0; i < config.sft.curriculum.size(); ++i) {
    const auto where = config.source + ".sft.curriculum[" + std::to_string(i) + "].task";
    const auto task = sft_phase_task(config, i);
    if (config.is_arithmetic()) {
      env::arithmetic_config_from_json(task, where);
    } else {
      env::make_environment(config.env.name, task, where);
    }
  }
}

void derive_dependent_settings(RunConfig& config) {
  const bool grouped = config.learner.baseline == algo::BaselineKind::kGroup;
  config.replay.group_size = grouped ? config.learner.group_size : 1;
  if (grouped && config.rollout.episodes_per_actor % config.learner.group_size != 0) {
    throw Error(config.source + ": rollout.episodes_per_actor (" + std::to_string(config.rollout.episodes_per_actor) +
                ") must be a multiple of learner.group_size (" + std::to_string(config.learner.group_size) + ")");
  }
  if (config.train.mode == "sync") {
    config.replay.synchronous = true;
    config.replay.min_batch = config.replay.max_batch = config.rollout.num_actors * config.rollout.episodes_per_actor;
    config.replay.max_staleness = 0;
    config.replay.capacity = std::max(config.replay.capacity, config.replay.max_batch);
  }
  // Delayed weights make every token at least that many versions stale, so
  // a delay above the admission bound would drop every trajectory.
  if (config.rollout.weight_delay_versions > 0 && config.replay.max_staleness >= 0 &&
      config.rollout.weight_delay_versions > config.replay.max_staleness) {
    throw Error(config.source + ": rollout.weight_delay_versions (" +
                std::to_string(config.rollout.weight_delay_versions) + ") exceeds replay.max_staleness (" +
                std::to_string(config.replay.max_staleness) + (config.train.mode == "sync" ? ", 0 in sync mode" : "") +
                "): every trajectory would be dropped as stale");
  }
  config.replay.validate(config.source + ".replay");
  config.learner.validate(config.source + ".learner");
}

// "model": sao's own architecture keys, or "path" to a Hugging Face
// directory whose config.json and tokenizer.json define the model. Keys
// beside "path" may only repeat what the directory says: a run config that
// disagrees with its weights would build actors of another shape. The one
// exception is max_position_embeddings, which may cap the context.
void read_model(nlohmann::json section, const std::string& source, RunConfig& config) {
  if (section.is_object() && section.contains("prompt_format")) {
    const auto& format = section["prompt_format"];
    if (!format.is_string() || (format != "auto" && format != "chat" && format != "plain"))
      throw Error(source + ": model.prompt_format must be \"auto\", \"chat\" or \"plain\", got " +
                  base::dump_json(format));
    config.prompt_format = format.get<std::string>();
    section.erase("prompt_format");
  }
  if (!section.contains("path")) {
    if (config.prompt_format == "chat")
      throw Error(source + ": model.prompt_format \"chat\" needs model.path (sao's byte model has no chat template)");
    config.model = model::model_config_from_json(section, source + ": model", model::ConfigKind::kRunConfig);
    if (config.model.vocab_size < tokenizer::ByteTokenizer::kVocabSize) {
      throw Error(source + ": model.vocab_size " + std::to_string(config.model.vocab_size) +
                  " is smaller than the byte tokenizer's " + std::to_string(tokenizer::ByteTokenizer::kVocabSize));
    }
    return;
  }
  const auto& path = section["path"];
  if (!path.is_string() || path.get<std::string>().empty())
    throw Error(source + ": model.path must be a directory name, got " + base::dump_json(path));
  config.model_path = path.get<std::string>();
  if (!std::filesystem::is_directory(config.model_path))
    throw Error(source + ": model.path " + config.model_path + ": no such directory");
  config.model = model::load_checkpoint_config(config.model_path);
  const auto from_directory = model::model_config_settings_to_json(config.model);
  for (const auto& [key, value] : section.items()) {
    if (key == "path") continue;
    // A context cap, as serving engines allow: the run uses at most this
    // many positions of the model's context (memory is sized by it).
    if (key == "max_position_embeddings" && value.is_number_integer() && value.get<int64_t>() >= 1 &&
        value.get<int64_t>() <= config.model.max_position_embeddings) {
      config.model.max_position_embeddings = value.get<int64_t>();
      continue;
    }
    if (key == "max_position_embeddings")
      throw Error(source + ": model.max_position_embeddings is " + base::dump_json(value) + " but " +
                  config.model_path + "/config.json says " + base::dump_json(from_directory[key]) +
                  " (with model.path it may cap the context at a positive integer up to that, not extend it)");
    if (!from_directory.contains(key) || from_directory[key] != value)
      throw Error(source + ": model." + key + " is " + base::dump_json(value) + " but " + config.model_path +
                  "/config.json says " +
                  (from_directory.contains(key) ? base::dump_json(from_directory[key]) : "nothing") +
                  " (with model.path the architecture comes from the directory; remove model." + key + ")");
  }
  const auto tokenizer = tokenizer::load_tokenizer(config.model_path, config.prompt_format);
  if (tokenizer->vocab_size() > config.model.vocab_size)
    throw Error(source + ": model.path " + config.model_path + ": the tokenizer has " +
                std::to_string(tokenizer->vocab_size()) + " ids but config.json's vocab_size is " +
                std::to_string(config.model.vocab_size));
  if (tokenizer->eos_id() < 0)
    throw Error(source + ": model.path " + config.model_path +
                ": tokenizer_config.json names no eos_token, so generation could never stop");
}

}  // namespace

RunConfig parse_run_config(const nlohmann::json& document, const std::string& source) {
  RunConfig config;
  config.source = source;
  config.document = document;
  JsonReader root(document, source);
  read_run(root.section("run"), config.run);
  read_threads(root.section("threads"), config.threads);
  root.section("model");  // marks the key as known and checks it is an object
  read_model(document.value("model", nlohmann::json::object()), source, config);
  root.section("task");  // marks the key as known and checks it is an object
  root.section("env");
  read_env(JsonReader(document.value("env", nlohmann::json::object()), source + ".env"), config.env);
  // Before the name is looked up: the plugin is what registers it.
  if (!config.env.plugin.empty()) env::load_environment_plugin(config.env.plugin, source + ".env.plugin");
  config.task_document = document.value("task", nlohmann::json::object());
  if (config.env.name == "arithmetic") {
    config.task = env::arithmetic_config_from_json(config.task_document, source + ".task");
  } else {
    // Any other environment checks its own section; building one instance here
    // reports a bad key before a run starts rather than inside an actor.
    env::make_environment(config.env.name, config.task_document, source + ".task");
  }
  read_sft(root.section("sft"), config.sft);
  check_sft_curriculum_tasks(config);
  read_eval(root.section("eval"), config.eval);
  read_rollout(root.section("rollout"), config.rollout);
  read_train(root.section("train"), config.train);
  read_console(root.section("console"), config.console);
  read_replay(root.section("replay"), config.replay);
  auto learner_reader = root.section("learner");
  config.learner = algo::LearnerConfig::from_json(learner_reader);
  root.reject_unknown_keys();
  derive_dependent_settings(config);
  return config;
}

nlohmann::json run_config_to_json(const RunConfig& config) {
  nlohmann::json document = nlohmann::json::object();
  run_keys(config.run, base::WriteKeys{document["run"]});
  threads_keys(config.threads, base::WriteKeys{document["threads"]});
  document["model"] = model::model_config_settings_to_json(config.model);
  if (!config.model_path.empty()) document["model"] = {{"path", config.model_path}};
  if (config.prompt_format != "auto") document["model"]["prompt_format"] = config.prompt_format;
  document["task"] = config.is_arithmetic() ? env::arithmetic_config_to_json(config.task) : config.task_document;
  env_keys(config.env, base::WriteKeys{document["env"]});
  sft_keys(config.sft, base::WriteKeys{document["sft"]});
  document["sft"]["curriculum"] = nlohmann::json::array();
  for (const auto& phase : config.sft.curriculum) {
    document["sft"]["curriculum"].push_back({{"fraction", phase.fraction}, {"task", phase.task}});
  }
  eval_keys(config.eval, base::WriteKeys{document["eval"]});
  train_keys(config.train, base::WriteKeys{document["train"]});
  console_keys(config.console, base::WriteKeys{document["console"]});
  rollout_keys(config.rollout, base::WriteKeys{document["rollout"]});
  replay_keys(config.replay, base::WriteKeys{document["replay"]});
  document["learner"] = config.learner.to_json();
  return document;
}

RunConfig load_run_config(const std::string& file, const std::vector<std::string>& overrides) {
  // A config file is an overlay on the embedded default (JSON merge patch),
  // so a preset names only what it changes.
  nlohmann::json document = default_config_document();
  bool curriculum_given = false;
  if (!file.empty()) {
    const auto overlay = read_json_file(file);
    if (!overlay.is_object()) throw Error("config " + file + ": expected a JSON object at the top level");
    document.merge_patch(overlay);
    // The default "task" section configures arithmetic; a file that switches
    // to another environment gives that environment's section whole.
    const auto env_name = overlay.value("env", nlohmann::json::object()).value("name", std::string("arithmetic"));
    if (env_name != "arithmetic" && overlay.contains("task")) document["task"] = overlay["task"];
    const auto sft = overlay.find("sft");
    curriculum_given = sft != overlay.end() && sft->is_object() && sft->contains("curriculum");
  }
  const std::string source = file.empty() ? "embedded config/default.json" : file;
  for (const auto& assignment : overrides) {
    apply_override(document, assignment);
    if (assignment.rfind("sft.curriculum", 0) == 0) curriculum_given = true;
  }
  // The default's curriculum phases are arithmetic's own demonstrations; a
  // run on another environment, or on demonstrations from a file, has none
  // unless its file or a --set gives one.
  auto& sft = document["sft"];
  const auto& env = document["env"];
  if (!curriculum_given && sft.is_object() && env.is_object()) {
    // Compared as JSON, so a name or path of the wrong type is left for
    // parse_run_config to report.
    const auto name = env.find("name");
    const auto data = sft.find("data");
    const bool arithmetic = name == env.end() || *name == "arithmetic";
    const bool own_demonstrations = data == sft.end() || *data == "";
    if (!arithmetic || !own_demonstrations) sft["curriculum"] = nlohmann::json::array();
  }
  return parse_run_config(document, source);
}

}  // namespace sao::config
