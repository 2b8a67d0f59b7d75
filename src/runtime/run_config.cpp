// Strict loading of run configs; see run_config.hpp.
#include "runtime/run_config.hpp"

#include "runtime/error.hpp"
#include "runtime/json_reader.hpp"
#include "sao/build_info.hpp"

#include <fstream>
#include <sstream>

namespace sao::runtime {

nlohmann::json default_config_document() { return nlohmann::json::parse(build_info::kDefaultConfigJson); }

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
  reader.reject_unknown_keys();
  if (threads.torch_intra_op < 1) throw Error(reader.where() + ".torch_intra_op: must be >= 1");
}

void read_task(JsonReader reader, env::ArithmeticConfig& task) {
  std::string name = "arithmetic";
  reader.read("name", name);
  if (name != "arithmetic") throw Error(reader.where() + ".name: unknown task '" + name + "' (known: arithmetic)");
  reader.read("min_digits", task.min_digits);
  reader.read("max_digits", task.max_digits);
  reader.read("operators", task.operators);
  reader.read("test_fraction", task.test_fraction);
  reader.read("test_size", task.test_size);
  reader.reject_unknown_keys();
  try {
    task.validate();
  } catch (const Error& error) {
    throw Error(reader.where() + ": " + error.what());
  }
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

}  // namespace

RunConfig parse_run_config(const nlohmann::json& document, const std::string& source) {
  RunConfig config;
  config.source = source;
  config.document = document;
  JsonReader root(document, source);
  read_run(root.section("run"), config.run);
  read_threads(root.section("threads"), config.threads);
  root.section("model");  // marks the key as known and checks it is an object
  config.model = model::model_config_from_json(document.value("model", nlohmann::json::object()),
                                               source + ": model", /*allow_unknown_keys=*/false);
  read_task(root.section("task"), config.task);
  read_sft(root.section("sft"), config.sft);
  read_eval(root.section("eval"), config.eval);
  root.reject_unknown_keys();
  return config;
}

RunConfig load_run_config(const std::string& file, const std::vector<std::string>& overrides) {
  nlohmann::json document = file.empty() ? default_config_document() : read_json_file(file);
  const std::string source = file.empty() ? "embedded config/default.json" : file;
  for (const auto& assignment : overrides) apply_override(document, assignment);
  return parse_run_config(document, source);
}

}  // namespace sao::runtime
