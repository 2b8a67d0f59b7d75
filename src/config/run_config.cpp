// Strict loading of run configs; see run_config.hpp.
#include "config/run_config.hpp"

#include "base/error.hpp"
#include "base/host_port.hpp"
#include "base/json_parse.hpp"
#include "base/json_reader.hpp"
#include "env/environment.hpp"
#include "env/remote/plugin_loader.hpp"
#include "env/tasks/arithmetic_env.hpp"
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
  env::ArithmeticConfig task;
  task.demonstration_worked_rate = 0.3;
  task_document = env::arithmetic_config_to_json(task);
  sft.curriculum = {SftPhase{0.667, {{"demonstration_worked_rate", 1.0}}}};
  // The longest worked answer, "w891>198", and EOS.
  eval.max_new_tokens = 10;
  rollout.max_new_tokens = 10;
  train.steps = 300;
}

std::string RunConfig::where(const std::string& section) const {
  const auto it = section_sources.find(section);
  return it != section_sources.end() ? it->second : source + "." + section;
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
    // A section the document leaves out (model.lora) starts empty; the
    // strict readers still refuse one that no config has.
    if (i > 0 && node->is_null()) *node = nlohmann::json::object();
    if (!node->is_object()) throw Error("--set '" + assignment + "': '" + keys[i - 1] + "' is not a section");
    node = &(*node)[keys[i]];
  }
  *node = value;
}

namespace {

using base::IntRange;
using base::RealRange;

// Every number key has a range, checked before the value is converted
// (base::JsonReader): a value outside it would wrap through a narrower
// conversion (4294967297 threads became 1), allocate without bound, or never
// finish. The message names the key, the range and the value.
constexpr int64_t kMaxSeed = 4294967295;  // seeds are 32-bit, as in most RL stacks
constexpr int64_t kMaxThreads = 256;
constexpr int64_t kMaxActors = 1024;
constexpr int64_t kMaxSteps = 100000000;
constexpr int64_t kMaxBatch = 1 << 20;
constexpr int64_t kMaxTokens = 1 << 16;
constexpr RealRange kRate{0.0, 1.0, true, false};
constexpr RealRange kWeightDecay{0.0, 1.0};
constexpr RealRange kGradClip{0.0, 1e6, true, false};
constexpr RealRange kTemperature{0.0, 100.0};
constexpr RealRange kPhaseFraction{0.0, 1.0, true, false};  // a share of sft.steps

// Each section's keys, listed once: read_* reads them (base::ReadKeys) and
// run_config_to_json writes them (base::WriteKeys).
template <typename Run, typename Visit>
void run_keys(Run& run, Visit visit) {
  visit("name", run.name);
  visit("seed", run.seed, IntRange{0, kMaxSeed});
  visit("dir", run.dir);
}

template <typename Threads, typename Visit>
void threads_keys(Threads& threads, Visit visit) {
  visit("torch_intra_op", threads.torch_intra_op, IntRange{1, kMaxThreads});
  visit("train_intra_op", threads.train_intra_op, IntRange{1, kMaxThreads});
}

template <typename Sft, typename Visit>
void sft_keys(Sft& sft, Visit visit) {
  visit("data", sft.data);
  visit("steps", sft.steps, IntRange{0, kMaxSteps});
  visit("batch_size", sft.batch_size, IntRange{1, kMaxBatch});
  visit("learning_rate", sft.learning_rate, kRate);
  visit("warmup_steps", sft.warmup_steps, IntRange{0, kMaxSteps});
  visit("weight_decay", sft.weight_decay, kWeightDecay);
  visit("grad_clip", sft.grad_clip, kGradClip);
  visit("log_every", sft.log_every, IntRange{1, kMaxSteps});
  visit("device", sft.device);
}

template <typename Eval, typename Visit>
void eval_keys(Eval& eval, Visit visit) {
  visit("temperature", eval.temperature, kTemperature);
  visit("max_new_tokens", eval.max_new_tokens, IntRange{0, kMaxTokens});
  visit("batch_size", eval.batch_size, IntRange{1, kMaxBatch});
}

template <typename Rollout, typename Visit>
void rollout_keys(Rollout& rollout, Visit visit) {
  visit("num_actors", rollout.num_actors, IntRange{1, kMaxActors});
  visit("env_actors", rollout.env_actors, IntRange{1, kMaxActors});
  visit("slots", rollout.slots, IntRange{1, kMaxBatch});
  visit("kv_cache_tokens", rollout.kv_cache_tokens, IntRange{0, int64_t{1} << 32});
  visit("kv_block_size", rollout.kv_block_size, IntRange{1, 4096});
  visit("prefill_chunk_tokens", rollout.prefill_chunk_tokens, IntRange{1, int64_t{1} << 24});
  visit("max_new_tokens", rollout.max_new_tokens, IntRange{1, kMaxTokens});
  visit("max_turns", rollout.max_turns, IntRange{1, 100000});
  visit("temperature", rollout.temperature, kTemperature);
  visit("top_k", rollout.top_k, IntRange{0, 1 << 24});
  visit("top_p", rollout.top_p, RealRange{0.0, 1.0, true, false});
  visit("weight_switch", rollout.weight_switch);
  visit("env_timeout_ms", rollout.env_timeout_ms, IntRange{1, 3600000});
  visit("device", rollout.device);
  visit("weights_dtype", rollout.weights_dtype);
  visit("weight_delay_versions", rollout.weight_delay_versions, IntRange{0, 4096});
}

template <typename Train, typename Visit>
void train_keys(Train& train, Visit visit) {
  visit("mode", train.mode);
  visit("steps", train.steps, IntRange{0, kMaxSteps});
  visit("eval_every", train.eval_every, IntRange{0, kMaxSteps});
  visit("checkpoint_every", train.checkpoint_every, IntRange{0, kMaxSteps});
  visit("init_checkpoint", train.init_checkpoint);
  visit("scheduler_threads", train.scheduler_threads, IntRange{1, kMaxThreads});
  visit("scheduler_policy", train.scheduler_policy);
  visit("max_actor_failures", train.max_actor_failures, IntRange{1, 1000000});
  visit("failure_window_s", train.failure_window_s, IntRange{1, 86400});
  visit("max_lost_in_a_row", train.max_lost_in_a_row, IntRange{0, kMaxSteps});                // 0: no limit
  visit("max_env_failures_in_a_row", train.max_env_failures_in_a_row, IntRange{0, 1000000});  // 0: never
}

template <typename Console, typename Visit>
void console_keys(Console& console, Visit visit) {
  visit("enabled", console.enabled);
  visit("listen", console.listen);
  visit("port", console.port, IntRange{0, 65535});  // 0: any free port
}

template <typename Agent, typename Visit>
void agent_keys(Agent& agent, Visit visit) {
  visit("endpoint", agent.endpoint);
  visit("listen", agent.listen);
  visit("port", agent.port, IntRange{0, 65535});  // 0: any free port
  visit("session_timeout_s", agent.session_timeout_s, IntRange{1, 86400});
  visit("queue_timeout_s", agent.queue_timeout_s, IntRange{1, 86400});
  visit("max_sessions", agent.max_sessions, IntRange{1, 4096});
  visit("max_body_bytes", agent.max_body_bytes, IntRange{1024, 64 * 1024 * 1024});
  visit("model_name", agent.model_name);
}

template <typename Env, typename Visit>
void env_keys(Env& env, Visit visit) {
  visit("name", env.name);
  visit("plugin", env.plugin);
  visit("latency", env.latency.distribution);
  visit("latency_ms", env.latency.mean_ms, RealRange{0.0, env::kMaxDelayMs});
  visit("latency_sigma", env.latency.sigma, RealRange{0.0, 4.0, true, false});
  visit("latency_max_ms", env.latency.max_ms, RealRange{0.0, env::kMaxDelayMs});  // 0: 20 x latency_ms
}

// group_size and synchronous are not keys: derive_dependent_settings sets them.
template <typename Replay, typename Visit>
void replay_keys(Replay& replay, Visit visit) {
  visit("min_batch", replay.min_batch, kBatchRange);
  visit("max_batch", replay.max_batch, kBatchRange);
  visit("max_staleness", replay.max_staleness, kStalenessRange);
  visit("capacity", replay.capacity, IntRange{1, 1 << 24});
}

void read_run(JsonReader reader, RunSection& run) {
  run_keys(run, base::ReadKeys{reader});
  reader.reject_unknown_keys();
  if (run.dir.empty()) throw Error(reader.where() + ".dir: must not be empty");
}

void read_threads(JsonReader reader, ThreadsSection& threads) {
  threads_keys(threads, base::ReadKeys{reader});
  reader.reject_unknown_keys();
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
    phase_reader.read("fraction", phase.fraction, kPhaseFraction);
    phase_reader.read("task", phase.task);
    phase_reader.reject_unknown_keys();
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
  model::parse_device(sft.device, where + ".device");
  read_sft_curriculum(where, curriculum, sft);
}

void read_eval(JsonReader reader, EvalSection& eval) {
  eval_keys(eval, base::ReadKeys{reader});
  reader.reject_unknown_keys();
}

void read_rollout(JsonReader reader, RolloutSection& rollout) {
  // The key's name before continuous batching (episodes were decoded in
  // lockstep batches of this size); configs and stored runs still say it.
  if (reader.has("episodes_per_actor")) {
    if (reader.has("slots")) {
      throw Error(reader.where() + ": both 'slots' and its old name 'episodes_per_actor' are set; keep 'slots'");
    }
    reader.read("episodes_per_actor", rollout.slots, IntRange{1, kMaxBatch});
  }
  if (reader.has("bf16_autocast")) {
    throw Error(reader.where() +
                ".bf16_autocast was replaced by weights_dtype: \"bf16\" runs a bf16 replica whose weights are "
                "converted once per version (set that, or drop the key)");
  }
  rollout_keys(rollout, base::ReadKeys{reader});
  reader.reject_unknown_keys();
  const auto& where = reader.where();
  model::parse_device(rollout.device, where + ".device");
  if (rollout.kv_cache_tokens > 0 && rollout.kv_cache_tokens < rollout.kv_block_size) {
    throw Error(where + ".kv_cache_tokens: " + std::to_string(rollout.kv_cache_tokens) +
                " holds less than one block of kv_block_size (" + std::to_string(rollout.kv_block_size) +
                ") tokens; 0 sizes the pool as slots x model.max_position_embeddings");
  }
  try {
    rollout.weight_switch_mode();
    rollout.bf16_replica();
  } catch (const Error& error) {
    throw Error(where + "." + error.what());
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
  if (train.scheduler_policy != "stealing" && train.scheduler_policy != "sharing") {
    throw Error(where + ".scheduler_policy: expected \"stealing\" or \"sharing\", got \"" + train.scheduler_policy +
                "\"");
  }
}

void read_console(JsonReader reader, ConsoleSection& console) {
  console_keys(console, base::ReadKeys{reader});
  reader.reject_unknown_keys();
  if (console.listen.empty()) throw Error(reader.where() + ".listen: must be an address such as 127.0.0.1");
}

void read_agent(JsonReader reader, AgentSection& agent) {
  agent_keys(agent, base::ReadKeys{reader});
  reader.reject_unknown_keys();
  if (agent.listen.empty()) throw Error(reader.where() + ".listen: must be an address such as 127.0.0.1");
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
}

// Settings that follow from others: GRPO groups flow through rollout and
// replay as units, and a synchronous run hands the learner exactly one
// generation round (every rollout actor's batch) of a single version.
// Each phase's task, merged, must be a task the environment accepts; the
// error names the phase (a key misspelt there would otherwise surface only
// when SFT reaches it, or never, if the environment ignored it).
void check_sft_curriculum_tasks(const RunConfig& config) {
  for (size_t i = 0; i < config.sft.curriculum.size(); ++i) {
    const auto where = config.where("sft") + ".curriculum[" + std::to_string(i) + "].task";
    const auto task = sft_phase_task(config, i);
    env::make_environment(config.env.name, task, where);
  }
}

void derive_dependent_settings(RunConfig& config) {
  const bool grouped = config.learner.baseline == algo::BaselineKind::kGroup;
  config.replay.group_size = grouped ? config.learner.group_size : 1;
  if (grouped && config.rollout.slots % config.learner.group_size != 0) {
    throw Error(config.source + ": rollout.slots (" + std::to_string(config.rollout.slots) +
                ") must be a multiple of learner.group_size (" + std::to_string(config.learner.group_size) + ")");
  }
  if (config.train.mode == "sync") {
    config.replay.synchronous = true;
    config.replay.min_batch = config.replay.max_batch = config.rollout.num_actors * config.rollout.slots;
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
  // Every learner rank needs one trajectory of each batch at least.
  if (config.learner.ranks > config.replay.min_batch) {
    throw Error(config.source + ": learner.ranks (" + std::to_string(config.learner.ranks) +
                ") exceeds replay.min_batch (" + std::to_string(config.replay.min_batch) +
                "): a batch must hold one trajectory per learner rank; raise replay.min_batch");
  }
  // c10d's rendezvous and Gloo speak an unauthenticated protocol (as under
  // torchrun): off loopback, only a network the operator vouches for.
  const auto rank_host = base::parse_host_port(config.learner.rank_address, "learner.rank_address").host;
  if (config.learner.ranks > 1 && !base::is_loopback_host(rank_host) && !config.learner.rank_network_private) {
    throw Error(config.source + ": learner.rank_address " + config.learner.rank_address +
                " is not a loopback address: learner ranks talk c10d (TCPStore and Gloo), which authenticates "
                "nobody, so its port must only be reachable on the learners' private network; say so with "
                "learner.rank_network_private true");
  }
  // An agent's session is one episode: one rollout per prompt, and a
  // group baseline would need G sessions of one prompt, which agents do not send.
  if (config.agent.endpoint && config.replay.group_size != 1) {
    throw Error(config.source +
                ": agent.endpoint needs learner.group_size 1 (a critic baseline): an agent's session "
                "is one episode, never a group of G on one prompt");
  }
  config.replay.validate(config.where("replay"));
  config.learner.validate(config.where("learner"));
}

// "model": sao's own architecture keys, or "path" to a Hugging Face
// directory whose config.json and tokenizer.json define the model. Keys
// beside "path" may only repeat what the directory says: a run config that
// disagrees with its weights would build actors of another shape. The one
// exception is max_position_embeddings, which may cap the context.
void read_model(nlohmann::json section, const std::string& where, RunConfig& config) {
  if (section.is_object() && section.contains("prompt_format")) {
    const auto& format = section["prompt_format"];
    if (!format.is_string() || (format != "auto" && format != "chat" && format != "plain"))
      throw Error(where + ".prompt_format must be \"auto\", \"chat\" or \"plain\", got " + base::dump_json(format));
    config.prompt_format = format.get<std::string>();
    section.erase("prompt_format");
  }
  if (!section.contains("path")) {
    if (config.prompt_format == "chat")
      throw Error(where + ".prompt_format \"chat\" needs model.path (sao's byte model has no chat template)");
    config.model = model::model_config_from_json(section, where, model::ConfigKind::kRunConfig);
    if (config.model.vocab_size < tokenizer::ByteTokenizer::kVocabSize) {
      throw Error(where + ".vocab_size " + std::to_string(config.model.vocab_size) +
                  " is smaller than the byte tokenizer's " + std::to_string(tokenizer::ByteTokenizer::kVocabSize));
    }
    return;
  }
  const auto& path = section["path"];
  if (!path.is_string() || path.get<std::string>().empty())
    throw Error(where + ".path must be a directory name, got " + base::dump_json(path));
  if (base::has_nul(path.get<std::string>()))
    throw Error(where + ".path must not contain a NUL byte, got " + base::dump_json(path));
  config.model_path = path.get<std::string>();
  if (!std::filesystem::is_directory(config.model_path))
    throw Error(where + ".path " + config.model_path + ": no such directory");
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
      throw Error(where + ".max_position_embeddings is " + base::dump_json(value) + " but " + config.model_path +
                  "/config.json says " + base::dump_json(from_directory[key]) +
                  " (with model.path it may cap the context at a positive integer up to that, not extend it)");
    if (!from_directory.contains(key) || from_directory[key] != value)
      throw Error(where + "." + key + " is " + base::dump_json(value) + " but " + config.model_path +
                  "/config.json says " +
                  (from_directory.contains(key) ? base::dump_json(from_directory[key]) : "nothing") +
                  " (with model.path the architecture comes from the directory; remove model." + key + ")");
  }
  const auto tokenizer = tokenizer::load_tokenizer(config.model_path, config.prompt_format);
  if (tokenizer->vocab_size() > config.model.vocab_size)
    throw Error(where + ".path " + config.model_path + ": the tokenizer has " +
                std::to_string(tokenizer->vocab_size()) + " ids but config.json's vocab_size is " +
                std::to_string(config.model.vocab_size));
  if (tokenizer->eos_id() < 0)
    throw Error(where + ".path " + config.model_path +
                ": tokenizer_config.json names no eos_token, so generation could never stop");
}

}  // namespace

RunConfig parse_run_config(const nlohmann::json& document, const std::string& source,
                           const std::map<std::string, std::string>& section_sources) {
  RunConfig config;
  config.source = source;
  config.section_sources = section_sources;
  config.document = document;
  JsonReader root(document, source);
  // Marks the key as known, checks it is an object, and names it by where
  // it came from (the file, or the --set that changed it).
  auto section = [&](const char* key) {
    root.section(key);
    return JsonReader(document.value(key, nlohmann::json::object()), config.where(key));
  };
  read_run(section("run"), config.run);
  read_threads(section("threads"), config.threads);
  root.section("model");  // marks the key as known and checks it is an object
  // The model section's messages read "FILE: model.KEY" (as a checkpoint's config.json's do).
  const auto model_where = section_sources.count("model") ? section_sources.at("model") : source + ": model";
  read_model(document.value("model", nlohmann::json::object()), model_where, config);
  root.section("task");  // marks the key as known and checks it is an object
  read_env(section("env"), config.env);
  // Before the name is looked up: the plugin is what registers it.
  if (!config.env.plugin.empty()) env::load_environment_plugin(config.env.plugin, config.where("env") + ".plugin");
  config.task_document = document.value("task", nlohmann::json::object());
  // The environment checks its own section; building one instance here
  // reports a bad key before a run starts rather than inside an actor.
  env::make_environment(config.env.name, config.task_document, config.where("task"));
  read_sft(section("sft"), config.sft);
  check_sft_curriculum_tasks(config);
  read_eval(section("eval"), config.eval);
  read_rollout(section("rollout"), config.rollout);
  read_train(section("train"), config.train);
  read_console(section("console"), config.console);
  read_agent(section("agent"), config.agent);
  read_replay(section("replay"), config.replay);
  auto learner_reader = section("learner");
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
  document["task"] = config.task_document;
  env_keys(config.env, base::WriteKeys{document["env"]});
  sft_keys(config.sft, base::WriteKeys{document["sft"]});
  document["sft"]["curriculum"] = nlohmann::json::array();
  for (const auto& phase : config.sft.curriculum) {
    document["sft"]["curriculum"].push_back({{"fraction", phase.fraction}, {"task", phase.task}});
  }
  eval_keys(config.eval, base::WriteKeys{document["eval"]});
  train_keys(config.train, base::WriteKeys{document["train"]});
  console_keys(config.console, base::WriteKeys{document["console"]});
  agent_keys(config.agent, base::WriteKeys{document["agent"]});
  rollout_keys(config.rollout, base::WriteKeys{document["rollout"]});
  replay_keys(config.replay, base::WriteKeys{document["replay"]});
  document["learner"] = config.learner.to_json();
  return document;
}

std::string override_section(const std::string& assignment) {
  return assignment.substr(0, std::min(assignment.find('='), assignment.find('.')));
}

std::map<std::string, std::string> config_sources(const nlohmann::json& file_overlay, const std::string& file,
                                                  const std::vector<std::string>& overrides) {
  std::map<std::string, std::string> sources;
  for (const auto& assignment : overrides) {
    const auto section = override_section(assignment);
    auto& origin = sources[section];
    origin += (origin.empty() ? "--set " : ", --set ") + assignment;
  }
  for (auto& [section, origin] : sources) {
    const bool file_gives_it = file_overlay.is_object() && file_overlay.contains(section);
    origin = (file_gives_it ? file + " and " : "") + origin + ": " + section;
  }
  return sources;
}

void resolve_data_paths(nlohmann::json& document, const std::filesystem::path& base) {
  auto resolve = [&](nlohmann::json& value) {
    if (!value.is_string()) return;
    const std::filesystem::path path(value.get<std::string>());
    if (!path.empty() && path.is_relative()) value = (base / path).lexically_normal().string();
  };
  if (!document.is_object()) return;
  if (auto task = document.find("task"); task != document.end() && task->is_object()) {
    for (const char* key : {"train", "heldout"}) {
      auto paths = task->find(key);
      if (paths == task->end()) continue;
      if (paths->is_array()) {
        for (auto& path : *paths) resolve(path);
      } else {
        resolve(*paths);
      }
    }
  }
  if (auto sft = document.find("sft"); sft != document.end() && sft->is_object()) {
    if (auto data = sft->find("data"); data != sft->end()) resolve(*data);
  }
}

RunConfig load_run_config(const std::string& file, const std::vector<std::string>& overrides) {
  // A config file is an overlay on the embedded default (JSON merge patch),
  // so a preset names only what it changes.
  nlohmann::json document = default_config_document();
  nlohmann::json overlay = nlohmann::json::object();
  bool curriculum_given = false;
  std::error_code no_cwd;
  const auto cwd = std::filesystem::current_path(no_cwd);
  if (!file.empty()) {
    overlay = read_json_file(file);
    if (!overlay.is_object()) throw Error("config " + file + ": expected a JSON object at the top level");
    // A config's data files sit beside it: its relative paths mean the same
    // wherever sao runs from.
    resolve_data_paths(overlay, std::filesystem::absolute(file, no_cwd).parent_path());
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
  // What --set gave is relative to where sao runs (the file's are absolute by now).
  resolve_data_paths(document, cwd);
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
  return parse_run_config(document, source, config_sources(overlay, source, overrides));
}

model::EngineLimits RolloutSection::engine_limits(int64_t max_positions) const {
  model::EngineLimits limits;
  limits.kv_cache_tokens = kv_pool_tokens(max_positions);
  limits.block_size = kv_block_size;
  limits.prefill_chunk_tokens = prefill_chunk_tokens;
  return limits;
}

RolloutSection::WeightSwitch RolloutSection::weight_switch_mode() const {
  if (weight_switch == "in_flight") return WeightSwitch::kInFlight;
  if (weight_switch == "turn_boundary") return WeightSwitch::kTurnBoundary;
  throw Error("weight_switch: expected \"in_flight\" or \"turn_boundary\", got \"" + weight_switch + "\"");
}

bool RolloutSection::bf16_replica() const {
  if (weights_dtype == "fp32") return false;
  if (weights_dtype == "bf16") return true;
  throw Error("weights_dtype: expected \"fp32\" or \"bf16\", got \"" + weights_dtype + "\"");
}

rollout::EpisodeSettings RolloutSection::episode_settings() const {
  rollout::EpisodeSettings settings;
  settings.sampling.temperature = temperature;
  settings.sampling.top_k = top_k;
  settings.sampling.top_p = top_p;
  settings.sampling.max_new_tokens = max_new_tokens;
  settings.max_turns = max_turns;
  return settings;
}

}  // namespace sao::config
