// Strict loading of run configs; see run_config.hpp.
#include "config/run_config.hpp"

#include "env/arithmetic_env.hpp"
#include "env/environment.hpp"
#include "base/error.hpp"
#include "base/json_reader.hpp"
#include "sao/build_info.hpp"
#include "tokenizer/byte_tokenizer.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>

namespace sao::config {

using base::JsonReader;

nlohmann::json default_config_document() {
  return nlohmann::json::parse(build_info::kDefaultConfigJson);
}

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("config " + path + ": cannot open file");
  std::stringstream text;
  text << in.rdbuf();
  try {
    return nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::parse_error& error) {
    throw Error("config " + path + ": not valid JSON at byte " + std::to_string(error.byte) + ": " + error.what());
  }
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
    value = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error&) {
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

void read_run(JsonReader reader, RunSection& run) {
  reader.read("name", run.name);
  reader.read("seed", run.seed);
  reader.read("dir", run.dir);
  reader.reject_unknown_keys();
  if (run.dir.empty()) throw Error(reader.where() + ".dir: must not be empty");
}

void read_threads(JsonReader reader, ThreadsSection& threads) {
  reader.read("torch_intra_op", threads.torch_intra_op);
  reader.read("train_intra_op", threads.train_intra_op);
  reader.reject_unknown_keys();
  if (threads.torch_intra_op < 1) throw Error(reader.where() + ".torch_intra_op: must be >= 1");
  if (threads.train_intra_op < 1) throw Error(reader.where() + ".train_intra_op: must be >= 1");
}

void read_sft(JsonReader reader, SftSection& sft) {
  reader.read("steps", sft.steps);
  reader.read("batch_size", sft.batch_size);
  reader.read("learning_rate", sft.learning_rate);
  reader.read("warmup_steps", sft.warmup_steps);
  reader.read("weight_decay", sft.weight_decay);
  reader.read("grad_clip", sft.grad_clip);
  reader.read("log_every", sft.log_every);
  reader.reject_unknown_keys();
  const auto& where = reader.where();
  if (sft.steps < 0) throw Error(where + ".steps: must be >= 0");
  if (sft.batch_size < 1) throw Error(where + ".batch_size: must be >= 1");
  if (!(sft.learning_rate > 0)) throw Error(where + ".learning_rate: must be > 0");
  if (sft.warmup_steps < 0) throw Error(where + ".warmup_steps: must be >= 0");
  if (sft.weight_decay < 0) throw Error(where + ".weight_decay: must be >= 0");
  if (!(sft.grad_clip > 0)) throw Error(where + ".grad_clip: must be > 0");
  if (sft.log_every < 1) throw Error(where + ".log_every: must be >= 1");
}

void read_eval(JsonReader reader, EvalSection& eval) {
  reader.read("temperature", eval.temperature);
  reader.read("max_new_tokens", eval.max_new_tokens);
  reader.read("batch_size", eval.batch_size);
  reader.reject_unknown_keys();
  if (eval.temperature < 0) throw Error(reader.where() + ".temperature: must be >= 0 (0 = greedy)");
  if (eval.max_new_tokens < 1) throw Error(reader.where() + ".max_new_tokens: must be >= 1");
  if (eval.batch_size < 1) throw Error(reader.where() + ".batch_size: must be >= 1");
}

void read_rollout(JsonReader reader, RolloutSection& rollout) {
  reader.read("num_actors", rollout.num_actors);
  reader.read("env_actors", rollout.env_actors);
  reader.read("episodes_per_actor", rollout.episodes_per_actor);
  reader.read("max_new_tokens", rollout.max_new_tokens);
  reader.read("max_turns", rollout.max_turns);
  reader.read("temperature", rollout.temperature);
  reader.read("top_k", rollout.top_k);
  reader.read("top_p", rollout.top_p);
  reader.read("weight_switch", rollout.weight_switch);
  reader.read("env_timeout_ms", rollout.env_timeout_ms);
  reader.reject_unknown_keys();
  const auto& where = reader.where();
  if (rollout.num_actors < 1) throw Error(where + ".num_actors: must be >= 1");
  if (rollout.env_actors < 1) throw Error(where + ".env_actors: must be >= 1");
  if (rollout.episodes_per_actor < 1) throw Error(where + ".episodes_per_actor: must be >= 1");
  if (rollout.max_turns < 1) throw Error(where + ".max_turns: must be >= 1");
  if (rollout.env_timeout_ms < 1) throw Error(where + ".env_timeout_ms: must be >= 1");
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
  reader.read("mode", train.mode);
  reader.read("steps", train.steps);
  reader.read("eval_every", train.eval_every);
  reader.read("checkpoint_every", train.checkpoint_every);
  reader.read("init_checkpoint", train.init_checkpoint);
  reader.read("scheduler_threads", train.scheduler_threads);
  reader.read("scheduler_policy", train.scheduler_policy);
  reader.reject_unknown_keys();
  const auto& where = reader.where();
  if (train.mode != "async" && train.mode != "sync") {
    throw Error(where + ".mode: expected \"async\" or \"sync\", got \"" + train.mode + "\"");
  }
  if (train.steps < 0) throw Error(where + ".steps: must be >= 0");
  if (train.eval_every < 0) throw Error(where + ".eval_every: must be >= 0");
  if (train.checkpoint_every < 0) throw Error(where + ".checkpoint_every: must be >= 0");
  if (train.scheduler_threads < 1) throw Error(where + ".scheduler_threads: must be >= 1");
  if (train.scheduler_policy != "stealing" && train.scheduler_policy != "sharing") {
    throw Error(where + ".scheduler_policy: expected \"stealing\" or \"sharing\", got \"" + train.scheduler_policy +
                "\"");
  }
}

void read_console(JsonReader reader, ConsoleSection& console) {
  reader.read("enabled", console.enabled);
  reader.read("listen", console.listen);
  reader.read("port", console.port);
  reader.reject_unknown_keys();
  if (console.listen.empty()) throw Error(reader.where() + ".listen: must be an address such as 127.0.0.1");
  if (console.port < 0 || console.port > 65535)
    throw Error(reader.where() + ".port: must be in 0..65535 (0: any free port)");
}

void read_env(JsonReader reader, EnvSection& env) {
  reader.read("name", env.name);
  reader.reject_unknown_keys();
  if (env.name.empty()) throw Error(reader.where() + ".name: must name a registered environment");
}

void read_replay(JsonReader reader, replay::ReplayConfig& replay) {
  reader.read("min_batch", replay.min_batch);
  reader.read("max_batch", replay.max_batch);
  reader.read("max_staleness", replay.max_staleness);
  reader.read("capacity", replay.capacity);
  reader.reject_unknown_keys();
}

// Settings that follow from others: GRPO groups flow through rollout and
// replay as units, and a synchronous run hands the learner exactly one
// generation round (every rollout actor's batch) of a single version.
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
  config.replay.validate(config.source + ".replay");
  config.learner.validate(config.source + ".learner");
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
  config.model = model::model_config_from_json(document.value("model", nlohmann::json::object()), source + ": model",
                                               /*allow_unknown_keys=*/false);
  if (config.model.vocab_size < tokenizer::ByteTokenizer::kVocabSize) {
    throw Error(source + ": model.vocab_size " + std::to_string(config.model.vocab_size) +
                " is smaller than the byte tokenizer's " + std::to_string(tokenizer::ByteTokenizer::kVocabSize));
  }
  root.section("task");  // marks the key as known and checks it is an object
  root.section("env");
  read_env(JsonReader(document.value("env", nlohmann::json::object()), source + ".env"), config.env);
  config.task_document = document.value("task", nlohmann::json::object());
  if (config.env.name == "arithmetic") {
    config.task = env::arithmetic_config_from_json(config.task_document, source + ".task");
  } else {
    // Any other environment checks its own section; building one instance here
    // reports a bad key before a run starts rather than inside an actor.
    env::make_environment(config.env.name, config.task_document, source + ".task");
  }
  read_sft(root.section("sft"), config.sft);
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

RunConfig load_run_config(const std::string& file, const std::vector<std::string>& overrides) {
  // A config file is an overlay on the embedded default (JSON merge patch),
  // so a preset names only what it changes.
  nlohmann::json document = default_config_document();
  if (!file.empty()) {
    const auto overlay = read_json_file(file);
    if (!overlay.is_object()) throw Error("config " + file + ": expected a JSON object at the top level");
    document.merge_patch(overlay);
    // The default "task" section configures arithmetic; a file that switches
    // to another environment gives that environment's section whole.
    const auto env_name = overlay.value("env", nlohmann::json::object()).value("name", std::string("arithmetic"));
    if (env_name != "arithmetic" && overlay.contains("task")) document["task"] = overlay["task"];
  }
  const std::string source = file.empty() ? "embedded config/default.json" : file;
  for (const auto& assignment : overrides) apply_override(document, assignment);
  return parse_run_config(document, source);
}

}  // namespace sao::config
