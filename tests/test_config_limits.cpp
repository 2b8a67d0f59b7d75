// Config limits (issue 47 item 5, issue 48 item 4): every number key of
// every preset and every environment's task section refuses values that
// would narrow, overflow or never finish, naming the key and its range;
// every path key refuses a NUL byte; unknown keys suggest the nearest known
// one; data paths resolve against the config file's folder.
#include "base/error.hpp"
#include "base/json_parse.hpp"
#include "config/live_knobs.hpp"
#include "config/run_config.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using sao::config::load_run_config;

namespace {

std::string load_error(const std::string& file, const std::vector<std::string>& overrides) {
  try {
    load_run_config(file, overrides);
  } catch (const sao::Error& error) {
    return error.what();
  }
  return "";
}

// Every number leaf of a resolved config as a dotted --set path. Arrays
// (the curriculum) are left out: --set cannot address their elements, and
// their phases' task keys are the task section's.
void number_keys(const nlohmann::json& node, const std::string& path, std::vector<std::string>& out) {
  if (node.is_number()) out.push_back(path);
  if (!node.is_object()) return;
  for (const auto& [key, value] : node.items()) number_keys(value, path.empty() ? key : path + "." + key, out);
}

struct Setup {
  std::string file;                    // a preset, or "" for the embedded default
  std::vector<std::string> overrides;  // what makes it the environment under test
};

std::string source_path(const std::string& relative) {
  return std::string(SAO_SOURCE_DIR) + "/" + relative;
}

// Every preset, and the environments no preset uses (their sections given whole).
std::vector<Setup> setups() {
  std::vector<Setup> all = {{"", {}}};
  for (const char* folder : {"config", "deploy/envs", "examples/datasets", "examples/tools"}) {
    for (const auto& entry : fs::directory_iterator(source_path(folder))) {
      if (entry.path().extension() == ".json") all.push_back({entry.path().string(), {}});
    }
  }
  all.push_back({"", {"env.name=example", R"(task={"name": "example", "turns": 3, "word_length": 3,
                     "test_fraction": 0.2, "heldout_size": 32})"}});
  all.push_back({"", {"env.name=openenv", R"(task={"name": "openenv", "url": "http://127.0.0.1:9",
                     "invalid_action_reward": -1.0, "heldout_size": 10, "max_turns": 4, "timeout_ms": 1000,
                     "startup_timeout_ms": 1000, "max_reconnects": 3})"}});
  all.push_back({"", {"env.name=drift", R"(task={"name": "drift", "switch_every": 50})"}});
  all.push_back({"", {"env.name=countdown", R"(task={"name": "countdown"})"}});
  all.push_back({source_path("examples/datasets/add_words.json"),
                 {R"(task.verifier={"type": "numeric", "tolerance": 0.001, "relative_tolerance": 0.0})"}});
  return all;
}

}  // namespace

TEST_CASE("every number key of every preset and environment refuses 2^32+2, -2^63, 1e308 and NaN, naming its range") {
  // NaN is no JSON number: --set gives it as the string "NaN", which a
  // number key refuses by type with the same message.
  const std::vector<std::pair<std::string, std::string>> bad = {{"4294967298", "4294967298"},
                                                                {"-9223372036854775808", "-9223372036854775808"},
                                                                {"1e308", "1e+308"},
                                                                {"NaN", "string \"NaN\""}};
  size_t checked = 0;
  std::set<std::string> environments;
  for (const auto& setup : setups()) {
    const auto config = load_run_config(setup.file, setup.overrides);
    environments.insert(config.env.name);
    std::vector<std::string> keys;
    number_keys(config.document, "", keys);
    REQUIRE(keys.size() > 10);
    for (const auto& key : keys) {
      const auto leaf = key.substr(key.rfind('.') + 1);
      const auto section = key.substr(0, key.find('.'));
      for (const auto& [value, shown] : bad) {
        auto overrides = setup.overrides;
        overrides.push_back(key + "=" + value);
        const auto error = load_error(setup.file, overrides);
        INFO(setup.file << " --set " << key << "=" << value << " -> " << error);
        // "...<section>...<leaf>: must be an integer in [1, 256], got 4294967298"
        const auto rule = error.find(leaf + ": must be ");
        REQUIRE(rule != std::string::npos);
        CHECK(error.find(section) < rule);
        const auto range = error.find(" in ", rule);
        REQUIRE(range != std::string::npos);
        CHECK((error[range + 4] == '[' || error[range + 4] == '('));
        const auto got = error.find("], got ", range) != std::string::npos ? error.find("], got ", range)
                                                                           : error.find("), got ", range);
        REQUIRE(got != std::string::npos);
        CHECK(error.substr(got + 7) == shown);
        ++checked;
      }
    }
  }
  CHECK(environments == std::set<std::string>{"arithmetic", "calculator", "countdown", "dataset", "drift", "example",
                                              "external", "maze", "openenv"});
  MESSAGE(checked << " refusals checked");
}

TEST_CASE("the refusals are exact: key, range and value") {
  CHECK(load_error("", {"task.test_size=4294967298"}) ==
        "--set task.test_size=4294967298: task.test_size: must be an integer in [1, 1000000], got 4294967298");
  CHECK(load_error("", {"task.min_digits=4294967297"}) ==
        "--set task.min_digits=4294967297: task.min_digits: must be an integer in [1, 9], got 4294967297");
  CHECK(load_error("", {"learner.critic_updates=4294967297"}) ==
        "--set learner.critic_updates=4294967297: learner.critic_updates: must be an integer in [1, 1000], got "
        "4294967297");
  CHECK(load_error("", {"learner.dis_eps_high=1e308"}) ==
        "--set learner.dis_eps_high=1e308: learner.dis_eps_high: must be a number in [0, 100], got 1e+308");
  CHECK(load_error("", {"sft.learning_rate=0"}) ==
        "--set sft.learning_rate=0: sft.learning_rate: must be a number in (0, 1], got 0");
  CHECK(load_error("", {"model.hidden_size=1e308"}) ==
        "--set model.hidden_size=1e308: model.hidden_size: must be an integer in [1, 16384], got 1e+308");
  CHECK(
      load_error("", {R"(sft.curriculum=[{"fraction": 1e308}])"}) ==
      R"(--set sft.curriculum=[{"fraction": 1e308}]: sft.curriculum[0].fraction: must be a number in (0, 1], got 1e+308)");
  // An integer written as a float is an integer; a fraction is not.
  CHECK(load_run_config("", {"train.steps=40.0"}).train.steps == 40);
  CHECK(load_error("", {"train.steps=40.5"}) ==
        "--set train.steps=40.5: train.steps: must be an integer in [0, 100000000], got 40.5");
}

TEST_CASE("live knobs refuse what the config refuses, before any value becomes an integer") {
  using sao::config::parse_knob_change;
  CHECK_THROWS_WITH_AS(parse_knob_change("max_batch", "4294967298"),
                       "set max_batch: must be an integer in [1, 1048576], got 4294967298", sao::Error);
  CHECK_THROWS_WITH_AS(parse_knob_change("min_batch", "1e308"),
                       "set min_batch: must be an integer in [1, 1048576], got 1e308", sao::Error);
  CHECK_THROWS_WITH_AS(parse_knob_change("max_staleness", "-9223372036854775808"),
                       "set max_staleness: must be an integer in [-1, 100000000], got -9223372036854775808",
                       sao::Error);
  CHECK_THROWS_WITH_AS(parse_knob_change("actor_lr", "1e308"), "set actor_lr: must be in (0, 1], got 1e308",
                       sao::Error);
  CHECK_THROWS_WITH_AS(parse_knob_change("critic_lr", "nan"), "set critic_lr: 'nan' is not a finite number",
                       sao::Error);
  CHECK(parse_knob_change("max_staleness", "100000000").value == 100000000);
}

TEST_CASE("every path key refuses a NUL byte, naming the key") {
  // "a\u0000b" in JSON is a string with a NUL inside: the system call would
  // see only "a".
  const std::string nul = R"("a\u0000b")";
  const std::string dataset = R"(task={"name": "dataset", "train": "t.jsonl"})";
  const std::string external = R"(task={"name": "external", "command": ["python3"]})";
  struct Case {
    std::vector<std::string> overrides;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{"run.dir=" + nul}, R"(--set run.dir="a\u0000b": run.dir: must not contain a NUL byte, got "a\u0000b")"},
      {{"train.init_checkpoint=" + nul},
       R"(--set train.init_checkpoint="a\u0000b": train.init_checkpoint: must not contain a NUL byte, got "a\u0000b")"},
      {{"env.plugin=" + nul},
       R"(--set env.plugin="a\u0000b": env.plugin: must not contain a NUL byte, got "a\u0000b")"},
      {{"model.path=" + nul}, R"(--set model.path="a\u0000b": model.path must not contain a NUL byte, got "a\u0000b")"},
      {{"env.name=dataset", R"(task={"name": "dataset", "train": "/t\u0000.jsonl"})"},
       R"(--set task={"name": "dataset", "train": "/t\u0000.jsonl"}: task.train: must not contain a NUL byte, got "/t\u0000.jsonl")"},
      {{"env.name=dataset", R"(task={"name": "dataset", "train": "/t.jsonl", "heldout": ["/h\u0000.jsonl"]})"},
       R"(--set task={"name": "dataset", "train": "/t.jsonl", "heldout": ["/h\u0000.jsonl"]}: task.heldout: must not contain a NUL byte, got "/h\u0000.jsonl")"},
      {{"env.name=external", R"(task={"name": "external", "command": ["python3"], "cwd": "a\u0000b"})"},
       R"(--set task={"name": "external", "command": ["python3"], "cwd": "a\u0000b"}: task.cwd: must not contain a NUL byte, got "a\u0000b")"},
      {{"env.name=external", R"(task={"name": "external", "command": ["python3\u0000"]})"},
       R"(--set task={"name": "external", "command": ["python3\u0000"]}: task.command: must not contain a NUL byte, got "python3\u0000")"},
      {{"env.name=openenv", R"(task={"name": "openenv", "url": "http://a\u0000b"})"},
       R"(--set task={"name": "openenv", "url": "http://a\u0000b"}: task.url: must not contain a NUL byte, got "http://a\u0000b")"},
  };
  for (const auto& test : cases) {
    INFO(test.overrides.back());
    CHECK(load_error("", test.overrides) == test.expected);
  }
  // sft.data is made absolute first (it is relative to the working directory).
  const auto data_error = load_error("", {"sft.data=" + nul});
  INFO(data_error);
  CHECK(data_error.rfind(R"(--set sft.data="a\u0000b": sft.data: must not contain a NUL byte, got ")", 0) == 0);
  CHECK(data_error.size() > 9);
  CHECK(data_error.substr(data_error.size() - 9) == R"(a\u0000b")");
}

TEST_CASE("an unknown key names its nearest known key, every known key, and the --set it came from") {
  const auto folder = fs::temp_directory_path() / "sao_test_config_limits_typo";
  fs::remove_all(folder);
  fs::create_directories(folder);
  const auto file = (folder / "run.json").string();
  std::ofstream(file) << R"({"env": {"name": "dataset"},
    "task": {"name": "dataset", "train": "train.jsonl", "verifer": "numeric"}})";
  CHECK(load_error(file, {}) == file +
                                    ".task: unknown key 'verifer' (did you mean 'verifier'?); known keys: heldout, "
                                    "heldout_fraction, name, train, verifier");
  // The same section from --set names the --set, not the default config file.
  const std::string section = R"(task={"name": "dataset", "train": "train.jsonl", "verifer": "numeric"})";
  CHECK(load_error("", {"env.name=dataset", section}) ==
        "--set " + section +
            ": task: unknown key 'verifer' (did you mean 'verifier'?); known keys: heldout, heldout_fraction, name, "
            "train, verifier");
  // A --set into a section the file gives names both.
  CHECK(load_error(file, {"task.verifer=exact"}) ==
        file +
            " and --set task.verifer=exact: task: unknown key 'verifer' (did you mean 'verifier'?); known keys: "
            "heldout, heldout_fraction, name, train, verifier");
  // Several unknown keys; one too far from any known key to suggest.
  CHECK(load_error("", {"sft.learing_rate=0.1", "sft.zzzzzzzzzz=1"}) ==
        "--set sft.learing_rate=0.1, --set sft.zzzzzzzzzz=1: sft: unknown keys 'learing_rate' (did you mean "
        "'learning_rate'?), 'zzzzzzzzzz'; known keys: batch_size, curriculum, data, device, grad_clip, learning_rate, "
        "log_every, steps, warmup_steps, weight_decay");
  fs::remove_all(folder);
}

TEST_CASE("data paths in a config file resolve against its folder, --set paths against the working directory") {
  const auto folder = fs::weakly_canonical(fs::temp_directory_path() / "sao_test_config_limits_paths");
  const auto elsewhere = folder / "elsewhere";
  fs::remove_all(folder);
  fs::create_directories(folder / "data");
  fs::create_directories(elsewhere);
  const std::string line = R"({"prompt": "1+1=", "answer": 2})";
  std::ofstream(folder / "data" / "train.jsonl") << line << "\n"
                                                 << R"({"prompt": "1+2=", "answer": 3})"
                                                 << "\n";
  std::ofstream(folder / "data" / "heldout.jsonl") << R"({"prompt": "2+2=", "answer": 4})"
                                                   << "\n";
  std::ofstream(folder / "data" / "demos.jsonl") << R"({"prompt": "1+3=", "response": "4"})"
                                                 << "\n";
  const auto file = (folder / "data" / "run.json").string();
  std::ofstream(file) << R"({"env": {"name": "dataset"},
    "task": {"name": "dataset", "train": "train.jsonl", "heldout": ["heldout.jsonl"], "verifier": "numeric"},
    "sft": {"data": "demos.jsonl"}})";

  const auto cwd = fs::current_path();
  fs::current_path(elsewhere);  // not the config's folder
  const auto config = load_run_config(file, {});
  CHECK(config.task_document["train"] == (folder / "data" / "train.jsonl").string());
  CHECK(config.task_document["heldout"] == nlohmann::json::array({(folder / "data" / "heldout.jsonl").string()}));
  CHECK(config.sft.data == (folder / "data" / "demos.jsonl").string());

  // A missing file names the key and where it was looked for.
  fs::remove(folder / "data" / "heldout.jsonl");
  CHECK(load_error(file, {}) == file + ".task.heldout: " + (folder / "data" / "heldout.jsonl").string() +
                                    ": cannot read (No such file or directory)");

  // --set paths are the working directory's.
  std::ofstream(elsewhere / "train.jsonl") << line << "\n";
  const auto from_set = load_run_config(
      "", {"env.name=dataset", R"(task={"name": "dataset", "train": "train.jsonl", "verifier": "numeric",
                                    "heldout_fraction": 0.0})",
           "sft.data=demos.jsonl"});
  CHECK(from_set.task_document["train"] == (elsewhere / "train.jsonl").string());
  CHECK(from_set.sft.data == (elsewhere / "demos.jsonl").string());
  CHECK(load_error("", {"env.name=dataset", R"(task={"name": "dataset", "train": "gone.jsonl"})"}) ==
        R"(--set task={"name": "dataset", "train": "gone.jsonl"}: task.train: )" + (elsewhere / "gone.jsonl").string() +
            ": cannot read (No such file or directory)");
  fs::current_path(cwd);
  fs::remove_all(folder);
}
