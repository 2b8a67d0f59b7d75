// Loading an untrusted checkpoint directory: nothing is allocated before
// config.json and the weights' header agree, nothing but regular files is
// read, NaN weights and hostile JSON are refused by name, and `sao eval`
// never runs an environment command stored with the checkpoint.
#include "base/error.hpp"
#include "config/run_config.hpp"
#include "model/checkpoint.hpp"
#include "model/safetensors.hpp"
#include "train/eval_config.hpp"

#include "test_checkpoint_fixtures.hpp"

#include "test_process_helpers.hpp"

#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <limits>
#include <sstream>

namespace fs = std::filesystem;

using sao_test::error_of;

namespace {

fs::path fresh_dir(const std::string& name) {
  return sao_test::fresh_dir("load_", name);
}
using sao_test::small_config;

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A saved small policy; returns its directory. The tests edit its files to
// reach each content check, so it has no MANIFEST.json, as a hand-made or
// downloaded directory has none (with one, the checksum stops the load
// first: test_checkpoint_integrity).
fs::path saved_checkpoint(const std::string& name, const nlohmann::json& info = {{"step", 3}}) {
  const auto dir = fresh_dir(name);
  sao::model::CausalLM policy(small_config());
  sao::model::init_weights(*policy, 11);
  sao::model::save_policy_checkpoint(dir.string(), policy, info);
  fs::remove(dir / "MANIFEST.json");
  return dir;
}

// Rewrites one key of the checkpoint's config.json.
void set_config_key(const fs::path& dir, const std::string& key, const nlohmann::json& value) {
  auto config = nlohmann::json::parse(read_text(dir / "config.json"));
  config[key] = value;
  std::ofstream(dir / "config.json") << config.dump();
}

// Runs `action` on a thread. If it is still blocked on the FIFO after 10 s
// (opening a FIFO for reading waits for a writer), a writer is opened to
// release it, so the test fails instead of hanging.
std::string error_without_blocking(const fs::path& fifo, const std::function<void()>& action) {
  auto result = std::async(std::launch::async, [&] { return error_of(action); });
  if (result.wait_for(std::chrono::seconds(10)) == std::future_status::timeout) {
    FAIL_CHECK("blocked on the FIFO " << fifo.string());
    const int writer = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (writer >= 0) ::close(writer);
  }
  return result.get();
}

}  // namespace

TEST_CASE("a config.json that disagrees with its weights names the key and both values") {
  const auto dir = saved_checkpoint("mismatch");
  const auto load = [&] { sao::model::load_policy_checkpoint(dir.string()); };
  const std::string where = "checkpoint " + dir.string() + ": ";

  SUBCASE("num_hidden_layers") {
    set_config_key(dir, "num_hidden_layers", 200);
    CHECK(error_of(load) == where +
                                "config.json num_hidden_layers is 200 but model.safetensors has 2 (tensors of "
                                "layers 0 to 1)");
  }
  SUBCASE("hidden_size") {
    set_config_key(dir, "hidden_size", 64);
    CHECK(error_of(load) == where +
                                "config.json hidden_size is 64 but model.safetensors has 32 (tensor "
                                "'model.embed_tokens.weight' has shape [264, 32])");
  }
  SUBCASE("vocab_size") {
    set_config_key(dir, "vocab_size", 300);
    CHECK(error_of(load) == where +
                                "config.json vocab_size is 300 but model.safetensors has 264 (tensor "
                                "'model.embed_tokens.weight' has shape [264, 32])");
  }
  SUBCASE("intermediate_size") {
    set_config_key(dir, "intermediate_size", 48);
    CHECK(error_of(load) == where +
                                "config.json intermediate_size is 48 but model.safetensors has 64 (tensor "
                                "'model.layers.0.mlp.gate_proj.weight' has shape [64, 32])");
  }
  SUBCASE("heads") {
    set_config_key(dir, "num_key_value_heads", 4);
    CHECK(error_of(load) == where +
                                "config.json num_key_value_heads is 4 but model.safetensors has 2 (tensor "
                                "'model.layers.0.self_attn.k_proj.weight' has shape [16, 32], and head_dim is "
                                "hidden_size 32 / num_attention_heads 4 = 8)");
    set_config_key(dir, "num_key_value_heads", 2);
    set_config_key(dir, "num_attention_heads", 2);
    CHECK(error_of(load) == where +
                                "config.json num_key_value_heads is 2 but model.safetensors has 1 (tensor "
                                "'model.layers.0.self_attn.k_proj.weight' has shape [16, 32], and head_dim is "
                                "hidden_size 32 / num_attention_heads 2 = 16)");
  }
  SUBCASE("tie_word_embeddings and attention_bias") {
    set_config_key(dir, "tie_word_embeddings", false);
    CHECK(error_of(load) ==
          where + "config.json tie_word_embeddings is false but model.safetensors has no separate 'lm_head.weight'");
    set_config_key(dir, "tie_word_embeddings", true);
    set_config_key(dir, "attention_bias", true);
    CHECK(error_of(load) == where +
                                "config.json attention_bias is true but model.safetensors has no "
                                "'model.layers.0.self_attn.q_proj.bias'");
  }
  SUBCASE("a tied checkpoint that also saves lm_head.weight loads, the head tied to the embedding") {
    auto weights = sao::model::load_safetensors((dir / "model.safetensors").string()).tensors;
    const auto embedding = weights.at("model.embed_tokens.weight").clone();
    sao::model::NamedTensors tensors(weights.begin(), weights.end());
    tensors.emplace_back("lm_head.weight", torch::full_like(embedding, 7.0));  // as transformers, ignored
    sao::model::save_safetensors((dir / "model.safetensors").string(), tensors);
    const auto policy = sao::model::load_policy_checkpoint(dir.string());
    const auto parameters = policy->named_parameters();
    CHECK_FALSE(parameters.contains("lm_head.weight"));
    CHECK(torch::equal(parameters["model.embed_tokens.weight"], embedding));
    // A head of another shape is no copy of this model's head.
    tensors.back().second = torch::ones({3, 32});
    sao::model::save_safetensors((dir / "model.safetensors").string(), tensors);
    CHECK(error_of(load) == where +
                                "config.json tie_word_embeddings is true and the ignored 'lm_head.weight' must then "
                                "be [264, 32], but tensor 'lm_head.weight' has shape [3, 32]");
  }
  SUBCASE("a tensor the config does not imply") {
    auto weights = sao::model::load_safetensors((dir / "model.safetensors").string()).tensors;
    sao::model::NamedTensors tensors(weights.begin(), weights.end());
    tensors.emplace_back("model.layers.0.extra.weight", torch::ones({2}));
    sao::model::save_safetensors((dir / "model.safetensors").string(), tensors);
    CHECK(error_of(load) ==
          where + "model.safetensors has tensor 'model.layers.0.extra.weight' that config.json does not imply");
  }
  SUBCASE("sizes beyond the bounds are refused before anything is allocated") {
    set_config_key(dir, "num_hidden_layers", 100000);
    CHECK(error_of(load) == "checkpoint " + (dir / "config.json").string() +
                                ".num_hidden_layers: must be an integer in [1, 256], got 100000");
    set_config_key(dir, "num_hidden_layers", 2);
    set_config_key(dir, "hidden_size", 65536);
    CHECK(error_of(load) ==
          "checkpoint " + (dir / "config.json").string() + ".hidden_size: must be an integer in [1, 16384], got 65536");
  }
  SUBCASE("the untouched checkpoint loads") {
    CHECK(error_of(load) == "(no error)");
  }
  fs::remove_all(dir);
}

TEST_CASE("a FIFO or device in place of a checkpoint file is refused by name without blocking") {
  const auto dir = saved_checkpoint("fifo");
  for (const char* name : {"config.json", "model.safetensors", "sao.json"}) {
    CAPTURE(name);
    const auto path = dir / name;
    const auto saved = path.string() + ".saved";
    fs::rename(path, saved);
    REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
    nlohmann::json info;
    CHECK(error_without_blocking(path, [&] { sao::model::load_policy_checkpoint(dir.string(), &info); }) ==
          "checkpoint " + path.string() + ": is a FIFO (named pipe), not a regular file");
    fs::remove(path);
    fs::create_symlink("/dev/zero", path);
    CHECK(error_of([&] { sao::model::load_policy_checkpoint(dir.string(), &info); }) ==
          "checkpoint " + path.string() + ": is a character device, not a regular file");
    fs::remove(path);
    fs::rename(saved, path);
  }
  fs::remove_all(dir);
}

TEST_CASE("NaN weights in a policy checkpoint are refused with the tensor named") {
  const auto dir = saved_checkpoint("nan");
  const auto weights = (dir / "model.safetensors").string();
  auto tensors = sao::model::load_safetensors(weights).tensors;
  tensors.at("model.norm.weight")[5] = std::numeric_limits<float>::quiet_NaN();
  sao::model::save_safetensors(weights, sao::model::NamedTensors(tensors.begin(), tensors.end()));
  CHECK(error_of([&] { sao::model::load_policy_checkpoint(dir.string()); }) ==
        "checkpoint " + weights +
            ": tensor 'model.norm.weight': 1 of 32 values are not finite (first: element 5 is nan); the weights are "
            "corrupt or from a diverged run");
  fs::remove_all(dir);
}

TEST_CASE("config.json and sao.json nested 10^5 levels deep are refused, not a stack overflow") {
  const auto dir = saved_checkpoint("deep");
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += R"({"a":)";
  deep += "1" + std::string(100000, '}');
  const auto original = read_text(dir / "config.json");
  std::ofstream(dir / "config.json") << deep;
  nlohmann::json info;
  const auto load = [&] { sao::model::load_policy_checkpoint(dir.string(), &info); };
  CHECK(error_of(load) ==
        "checkpoint " + (dir / "config.json").string() + ": JSON nested deeper than 256 levels at byte 1281");
  std::ofstream(dir / "config.json") << original;
  std::ofstream(dir / "sao.json") << deep;
  CHECK(error_of(load) ==
        "checkpoint " + (dir / "sao.json").string() + ": JSON nested deeper than 256 levels at byte 1281");
  std::ofstream(dir / "sao.json") << "[1]";
  CHECK(error_of(load) == "checkpoint " + (dir / "sao.json").string() + ": must be a JSON object, got array");
  CHECK(info.is_null());  // untouched by a failed load
  fs::remove_all(dir);
}

namespace {

// A stored run config whose external environment would create `marker`.
nlohmann::json run_config_running(const fs::path& marker) {
  auto document = sao::config::default_config_document();
  document["env"] = {{"name", "external"}};
  // As load_run_config resolves a run on another environment: without the
  // default's arithmetic curriculum.
  document["sft"]["curriculum"] = nlohmann::json::array();
  document["task"] = {{"name", "external"},
                      {"command", {"sh", "-c", "touch '" + marker.string() + "'"}},
                      {"heldout_size", 1},
                      {"timeout_ms", 2000}};
  return document;
}

std::string refusal(const fs::path& dir, const fs::path& marker) {
  return "checkpoint " + dir.string() +
         "/sao.json: its run_config uses environment 'external' (task.command [\"sh\",\"-c\",\"touch '" +
         marker.string() +
         "'\"]); sao eval does not run programs or contact addresses named by a checkpoint. Name the environment "
         "yourself with --config FILE (env and task sections, e.g. deploy/envs/guess_number.json) or --set "
         "task=..., or pass --trust-checkpoint-env to use the checkpoint's own";
}

}  // namespace

TEST_CASE("eval takes a self-contained task from the checkpoint but never an external command") {
  const auto marker = fresh_dir("marker_unit");
  sao::train::EvalConfigSources sources;
  sources.checkpoint_dir = "ck";
  sources.checkpoint_info = {{"run_config", run_config_running(marker)}};

  SUBCASE("refused by default, naming what it would run and what to pass") {
    CHECK(error_of([&] { sao::train::eval_run_config(sources); }) == refusal("ck", marker));
  }
  SUBCASE("--trust-checkpoint-env uses the stored environment") {
    sources.trust_checkpoint_env = true;
    const auto config = sao::train::eval_run_config(sources);
    CHECK(config.env.name == "external");
    CHECK(config.task_document["command"][0] == "sh");
    CHECK(config.source == "ck/sao.json");
  }
  SUBCASE("an environment the user names replaces the stored task whole") {
    sources.overrides = {R"(task={"name":"external","command":["sh"]})"};
    const auto config = sao::train::eval_run_config(sources);
    CHECK(config.task_document == nlohmann::json({{"name", "external"}, {"command", {"sh"}}}));
  }
  SUBCASE("so does a --set of one task key: nothing of the stored task is kept") {
    sources.overrides = {R"(task.command=["sh", "--port", "0"])"};
    const auto config = sao::train::eval_run_config(sources);
    CHECK(config.task_document == nlohmann::json({{"command", {"sh", "--port", "0"}}}));
  }
  SUBCASE("so does --config FILE") {
    sources.config_file = std::string(SAO_SOURCE_DIR) + "/deploy/envs/guess_number.json";
    const auto config = sao::train::eval_run_config(sources);
    CHECK(config.task_document["command"] == nlohmann::json({"python3", "deploy/envs/guess_number.py"}));
    CHECK(config.task_document["heldout_size"] == 50);
  }
  SUBCASE("switching to a self-contained environment needs no task") {
    sources.overrides = {"env.name=arithmetic"};
    const auto config = sao::train::eval_run_config(sources);
    CHECK(config.env.name == "arithmetic");
  }
  SUBCASE("a self-contained stored task is used as it is") {
    auto document = sao::config::default_config_document();
    document["task"]["test_size"] = 37;
    sources.checkpoint_info = {{"run_config", document}};
    CHECK(sao::train::eval_run_config(sources).task_document["test_size"] == 37);
  }
  CHECK_FALSE(fs::exists(marker));
}

TEST_CASE("sao eval on a checkpoint naming an external command runs nothing and says why") {
  const auto marker = fresh_dir("marker_cli");
  const auto dir = saved_checkpoint("evil", {{"step", 1}, {"run_config", run_config_running(marker)}});
  const auto output = dir.string() + ".out";
  const auto eval = [&](const std::string& flags) {
    const std::string command =
        std::string(SAO_BINARY) + " eval --checkpoint '" + dir.string() + "' " + flags + " > '" + output + "' 2>&1";
    const int status = std::system(command.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  CHECK(eval("") == 1);
  CHECK_FALSE(fs::exists(marker));
  CHECK(read_text(output).find(refusal(dir, marker)) != std::string::npos);
  // The stored command is real: trusted, it runs (`touch` then exits, an
  // environment that failed its episode).
  eval("--trust-checkpoint-env");
  CHECK(fs::exists(marker));
  fs::remove_all(dir);
  fs::remove(output);
  fs::remove(marker);
}
