// C++ environment plugins, as a user builds one: `cmake --install` sao,
// build examples/env_plugin/ out of tree with find_package(sao), load the
// library (in process and through `env.plugin` in a run config), and play its
// environment through sao sft and sao train. A library built against another
// sao, or one that is not a plugin at all, is refused with a message.
#include "base/error.hpp"
#include "env/environment.hpp"
#include "env/remote/plugin_loader.hpp"
#include "test_process_helpers.hpp"

#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

namespace fs = std::filesystem;
using sao_test::quoted;
using sao_test::run_command;

using sao_test::error_of;

namespace {

const fs::path& work_dir() {
  static const fs::path dir = [] {
    auto path = fs::temp_directory_path() / ("sao_test_plugin_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
    return path;
  }();
  return dir;
}

// Installs this build and builds the example plugin against the installation, once.
const fs::path& example_plugin() {
  static const fs::path library = [] {
    const fs::path build_dir = fs::path(SAO_BINARY).parent_path();
    const fs::path prefix = work_dir() / "prefix";
    const fs::path plugin_build = work_dir() / "plugin-build";
    const auto installed =
        run_command("cmake --install " + quoted(build_dir.string()) + " --prefix " + quoted(prefix.string()));
    REQUIRE_MESSAGE(installed.exit_code == 0, installed.output);
    REQUIRE(fs::exists(prefix / "bin" / "sao"));
    REQUIRE(fs::exists(prefix / "include/sao/env/env_plugin.hpp"));
    const auto configured = run_command("cmake -S " + quoted(std::string(SAO_SOURCE_DIR) + "/examples/env_plugin") +
                                        " -B " + quoted(plugin_build.string()) +
                                        " -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=" + quoted(prefix.string()));
    REQUIRE_MESSAGE(configured.exit_code == 0, configured.output);
    const auto built = run_command("cmake --build " + quoted(plugin_build.string()));
    REQUIRE_MESSAGE(built.exit_code == 0, built.output);
    return plugin_build / "libletter_count.so";
  }();
  return library;
}

// A shared library from C source text, compiled here.
fs::path compile_library(const std::string& name, const std::string& source) {
  const auto source_path = work_dir() / (name + ".c");
  std::ofstream(source_path) << source;
  const auto library = work_dir() / ("lib" + name + ".so");
  const auto compiled =
      run_command("cc -shared -fPIC -o " + quoted(library.string()) + " " + quoted(source_path.string()));
  REQUIRE_MESSAGE(compiled.exit_code == 0, compiled.output);
  return library;
}

}  // namespace

TEST_CASE("a plugin built out of tree against the installed sao registers and plays its environment") {
  const auto& library = example_plugin();
  REQUIRE(fs::exists(library));
  const auto names = sao::env::load_environment_plugin(library.string(), "test.env.plugin");
  CHECK(names == std::vector<std::string>{"letter_count"});
  CHECK(sao::env::load_environment_plugin(library.string(), "again") == names);  // loaded once
  auto env = sao::env::make_environment("letter_count", nlohmann::json::object(), "test.task");
  CHECK_FALSE(sao::env::is_self_contained_environment("letter_count"));
  const auto start = env->reset(3);
  CHECK(start.observation.rfind("How many ", 0) == 0);
  const auto demos = env->demonstrations(1, 3);
  REQUIRE(demos.size() == 1);
  const auto episode_start = env->reset(3 * 1000003);
  CHECK(episode_start.observation == demos[0].prompt);
  const auto done = env->step(demos[0].turns[0].action);
  CHECK(done.terminated);
  CHECK(done.reward == 1.0);
  std::set<std::string> heldout;
  for (int64_t i = 0; i < env->heldout_size(); ++i) heldout.insert(env->reset_heldout(i).observation);
  for (uint64_t seed = 0; seed < 200; ++seed) CHECK(heldout.count(env->reset(seed).observation) == 0);
  CHECK(error_of([] {
          sao::env::make_environment("letter_count", {{"max_length", 40}}, "cfg.task");
        }) == "cfg.task.max_length: must be an integer in [2, 12]");
}

TEST_CASE("env.plugin in a run config: sao sft and sao train play the plugin's environment") {
  const auto& library = example_plugin();
  const auto run_dir = work_dir() / "run";
  const std::string settings =
      " --run-dir " + quoted(run_dir.string()) +
      " --set env.name=letter_count --set env.plugin=" + quoted("\"" + library.string() + "\"") +
      " --set 'task={\"name\":\"letter_count\"}' --set sft.steps=20 --set sft.log_every=10"
      " --set model.hidden_size=32 --set model.intermediate_size=64 --set model.num_hidden_layers=1"
      " --set model.num_attention_heads=2 --set model.num_key_value_heads=1 --set model.max_position_embeddings=48"
      " --set eval.max_new_tokens=3 --set rollout.max_new_tokens=3 --set rollout.slots=8"
      " --set train.steps=3 --set train.eval_every=0 --set train.checkpoint_every=0";
  const auto sft = run_command(quoted(SAO_BINARY) + " sft" + settings);
  REQUIRE_MESSAGE(sft.exit_code == 0, sft.output);
  CHECK(sft.output.find("task letter_count") != std::string::npos);
  CHECK(sft.output.find("held-out accuracy") != std::string::npos);
  const auto train = run_command(quoted(SAO_BINARY) + " train" + settings);
  REQUIRE_MESSAGE(train.exit_code == 0, train.output);
  CHECK(train.output.find("finished (budget) after 3 learner steps") != std::string::npos);

  const auto missing = run_command(quoted(SAO_BINARY) + " sft --set env.plugin='\"/no/such/libenv.so\"'");
  CHECK(missing.exit_code != 0);
  // The section came from --set, so the error names that --set.
  CHECK(missing.output.find("--set env.plugin=\"/no/such/libenv.so\": env.plugin: plugin '/no/such/libenv.so' "
                            "cannot be found") != std::string::npos);
}

TEST_CASE("a library built against another sao, or not a plugin, is refused with a message") {
  const auto foreign = compile_library("foreign", R"C(
const char* sao_env_plugin_abi(void) { return "sao-env-plugin 0; sao 0.0.1"; }
void sao_env_plugin_register(const void* registrar) { (void)registrar; }
)C");
  const auto refused = error_of([&] { sao::env::load_environment_plugin(foreign.string(), "cfg.env.plugin"); });
  CHECK(refused.find("cfg.env.plugin: plugin '" + foreign.string() +
                     "' was built against another sao: it says \"sao-env-plugin 0; sao 0.0.1\", this sao is \"" +
                     sao::env::host_plugin_abi_stamp() + "\"") == 0);
  const auto plain = compile_library("plain", "int answer(void) { return 42; }\n");
  CHECK(error_of([&] {
          sao::env::load_environment_plugin(plain.string(), "cfg.env.plugin");
        }).find("is not a sao environment plugin") != std::string::npos);
  const auto text = work_dir() / "libtext.so";
  std::ofstream(text) << "not a library";
  CHECK(error_of([&] {
          sao::env::load_environment_plugin(text.string(), "cfg.env.plugin");
        }).find("cfg.env.plugin: cannot load plugin '" + text.string() + "'") == 0);
  CHECK(error_of([&] {
          sao::env::load_environment_plugin((work_dir() / "none.so").string(), "cfg.env.plugin");
        }).find("cannot be found") != std::string::npos);
  fs::remove_all(work_dir());
}
