// inspect_model_directory and `sao doctor --model DIR` on Hugging Face
// style directories made here: a tiny Llama checkpoint with the tiny
// byte-level tokenizer.json, the same weights in two shards with an index,
// and the ways such a directory goes wrong (an architecture sao does not
// compute, a shard the index misplaces, no tokenizer).
#include "config/model_directory.hpp"
#include "model/checkpoint.hpp"
#include "model/safetensors.hpp"
#include "model/transformer.hpp"
#include "test_process_helpers.hpp"
#include "test_tiny_run.hpp"
#include "test_tiny_tokenizer.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace {

// A small chat template: role, content, then the special token as end of turn.
constexpr const char* kChatTemplate =
    "{% for m in messages %}{{ m.role }}: {{ m.content }}<|special|>{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}";

namespace fs = std::filesystem;
using sao::config::inspect_model_directory;
using sao::config::ModelDirectoryReport;

sao::model::ModelConfig tiny_config() {
  auto config = sao_test::tiny_model();
  config.vocab_size = 320;  // the tiny tokenizer's 302 ids fit
  config.num_hidden_layers = 2;
  return config;
}

struct Directory {
  fs::path path;
  explicit Directory(const std::string& name)
      : path(fs::temp_directory_path() / ("sao_test_model_dir_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    sao::model::CausalLM policy(tiny_config());
    sao::model::init_weights(*policy, 3);
    sao::model::save_policy_checkpoint(path.string(), policy, {{"stage", "sft"}});
    // As the Hub has it: no MANIFEST.json, so the tests below can edit files.
    fs::remove(path / "MANIFEST.json");
    std::ofstream(path / "tokenizer.json") << sao_test::byte_level_json().dump();
    std::ofstream(path / "tokenizer_config.json")
        << R"({"eos_token": "<|special|>", "chat_template": ")" << kChatTemplate << R"("})";
    std::ofstream(path / "generation_config.json") << R"({"eos_token_id": [300, 301], "temperature": 0.7})";
  }
  ~Directory() { fs::remove_all(path); }

  void set_config(const std::string& key, const nlohmann::json& value) const {
    std::ifstream in(path / "config.json");
    auto config = nlohmann::json::parse(in);
    config[key] = value;
    std::ofstream(path / "config.json") << config.dump();
  }

  // The weights in two shards and an index, as large HF checkpoints are.
  void shard(bool misplace_one) const {
    const auto tensors = sao::model::load_safetensors((path / "model.safetensors").string()).tensors;
    sao::model::NamedTensors first, second;
    nlohmann::json weight_map = nlohmann::json::object();
    bool flip = false;
    for (const auto& [name, tensor] : tensors) {
      (flip ? second : first).emplace_back(name, tensor);
      weight_map[name] = flip ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors";
      flip = !flip;
    }
    if (misplace_one) weight_map[tensors.begin()->first] = "model-00002-of-00002.safetensors";
    sao::model::save_safetensors((path / "model-00001-of-00002.safetensors").string(), first);
    sao::model::save_safetensors((path / "model-00002-of-00002.safetensors").string(), second);
    std::ofstream(path / "model.safetensors.index.json") << nlohmann::json{{"weight_map", weight_map}}.dump();
    fs::remove(path / "model.safetensors");
  }
};

const sao::config::ModelDirectoryPart& part(const ModelDirectoryReport& report, const std::string& name) {
  const auto found =
      std::find_if(report.parts.begin(), report.parts.end(), [&](const auto& p) { return p.name == name; });
  REQUIRE(found != report.parts.end());
  return *found;
}

bool has_line(const sao::config::ModelDirectoryPart& part, const std::string& text) {
  return std::any_of(part.lines.begin(), part.lines.end(),
                     [&](const std::string& line) { return line.find(text) != std::string::npos; });
}

}  // namespace

TEST_CASE("a Llama-layout directory with a tokenizer.json is readable in every part") {
  const Directory dir("good");
  const auto report = inspect_model_directory(dir.path.string());
  CHECK(report.usable());
  const auto& config = part(report, "config.json");
  CHECK(has_line(config, "layers 2, hidden 32, intermediate 64, heads 2 (1 key/value), vocab 320, positions 32"));
  CHECK(has_line(config, "parameters " + std::to_string(tiny_config().parameter_count())));
  const auto& weights = part(report, "weights");
  CHECK(has_line(weights, "single file model.safetensors"));
  CHECK(has_line(weights, std::to_string(tiny_config().parameter_count()) + " values"));
  const auto& tokenizer = part(report, "tokenizer");
  CHECK(has_line(tokenizer, "tokenizer.json: 302 ids, 1 special"));
  CHECK(has_line(tokenizer, "bos none, eos \"<|special|>\" (300), pad none"));
  CHECK(has_line(part(report, "chat template"), "chat_template, 127 characters"));
  CHECK(has_line(part(report, "chat template"), "renders in sao; end of turn \"<|special|>\" (300)"));
  CHECK(has_line(part(report, "generation_config.json"), "eos_token_id [300,301], temperature 0.7"));
}

TEST_CASE("shards listed by model.safetensors.index.json are read, and a misplaced tensor is named") {
  const Directory dir("sharded");
  dir.shard(false);
  auto report = inspect_model_directory(dir.path.string());
  CHECK(report.usable());
  CHECK(has_line(part(report, "weights"), "sharded: 2 files (model.safetensors.index.json)"));
  CHECK(has_line(part(report, "weights"), std::to_string(tiny_config().parameter_count()) + " values"));
  const Directory misplaced("misplaced");
  misplaced.shard(true);
  report = inspect_model_directory(misplaced.path.string());
  CHECK_FALSE(part(report, "weights").usable);
  CHECK(has_line(part(report, "weights"), "is not listed for this file in the index"));
}

TEST_CASE("an architecture sao does not compute is refused key by key") {
  const Directory dir("gemma3");
  dir.set_config("model_type", "gemma3");
  dir.set_config("rope_scaling", {{"rope_type", "yarn"}, {"factor", 8.0}});
  dir.set_config("hidden_act", "gelu");
  const auto report = inspect_model_directory(dir.path.string());
  CHECK_FALSE(report.usable());
  const auto& config = part(report, "config.json");
  CHECK_FALSE(config.usable);
  CHECK(has_line(config, "error: config.json model_type: \"gemma3\" is not implemented"));
  CHECK(has_line(config, "error: config.json rope_scaling: type \"yarn\" is not implemented"));
  CHECK(has_line(config, "error: config.json hidden_act: \"gelu\" is not implemented (silu only)"));
  CHECK(has_line(config, "layers 2, hidden 32"));  // the sizes are still shown
  CHECK(part(report, "weights").usable);
}

TEST_CASE("a chat template sao cannot render makes the chat template part unusable") {
  const Directory dir("bad_template");
  std::ofstream(dir.path / "tokenizer_config.json")
      << R"({"eos_token": "<|special|>", "chat_template": "{% macro m() %}{% endmacro %}"})";
  const auto report = inspect_model_directory(dir.path.string());
  CHECK_FALSE(part(report, "chat template").usable);
  CHECK(has_line(part(report, "chat template"), "line 1: statement 'macro' is not supported"));
}

TEST_CASE("no tokenizer.json, or one larger than config.json's vocabulary, is an error of the tokenizer part") {
  const Directory dir("no_tokenizer");
  dir.set_config("vocab_size", 300);
  auto report = inspect_model_directory(dir.path.string());
  CHECK(has_line(part(report, "tokenizer"), "error: the tokenizer has 302 ids but config.json's vocab_size is 300"));
  fs::remove(dir.path / "tokenizer.json");
  report = inspect_model_directory(dir.path.string());
  CHECK_FALSE(part(report, "tokenizer").usable);
  CHECK(has_line(part(report, "tokenizer"), "no tokenizer.json (a Hugging Face model directory has one)"));
  CHECK_FALSE(inspect_model_directory((dir.path / "missing").string()).usable());
}

TEST_CASE("sao doctor --model prints the report and exits 1 when the directory is not usable") {
  const Directory dir("doctor");
  auto result = sao_test::run_command(std::string(SAO_BINARY) + " doctor --model " +
                                      sao_test::quoted(dir.path.string()) + " 2>&1");
  INFO(result.output);
  CHECK(result.exit_code == 0);
  CHECK(result.output.find("tokenizer              ok") != std::string::npos);
  CHECK(result.output.find("verdict                every part above is readable by sao") != std::string::npos);
  dir.set_config("model_type", "gemma3");
  result = sao_test::run_command(std::string(SAO_BINARY) + " doctor --model " + sao_test::quoted(dir.path.string()) +
                                 " 2>&1");
  CHECK(result.exit_code == 1);
  CHECK(result.output.find("config.json            NOT USABLE") != std::string::npos);
  CHECK(result.output.find("model_type: \"gemma3\" is not implemented") != std::string::npos);
}

// Issue 47: a downloaded chat template that divides the smallest integer by
// -1 or chains 10^5 filters made doctor die by a signal (exit 136, 139).
TEST_CASE("sao doctor --model names a hostile chat template's error and exits 1, not by a signal") {
  const Directory dir("doctor_hostile");
  const auto doctor = [&](const std::string& chat_template) {
    std::ofstream(dir.path / "chat_template.jinja") << chat_template;
    return sao_test::run_command(std::string(SAO_BINARY) + " doctor --model " + sao_test::quoted(dir.path.string()) +
                                 " 2>&1");
  };
  const std::string where = (dir.path / "chat_template.jinja").string();
  auto result = doctor("{{ (-9223372036854775807 - 1) // -1 }}");
  INFO(result.output);
  CHECK(result.exit_code == 1);
  CHECK(result.output.find("error: " + where +
                           ": line 1: integer overflow in '//': -9223372036854775808 // -1 does not fit in 64 bits") !=
        std::string::npos);
  std::string chain = "{{ 'x'";
  for (int i = 0; i < 100000; ++i) chain += "|trim";
  result = doctor(chain + " }}");
  CHECK(result.exit_code == 1);
  CHECK(result.output.find("error: " + where + ": line 1: expressions nest deeper than 200") != std::string::npos);
}
