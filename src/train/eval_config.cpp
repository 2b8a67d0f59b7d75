// The run config of `sao eval`; see eval_config.hpp.
#include "train/eval_config.hpp"

#include "base/error.hpp"
#include "base/json_parse.hpp"
#include "base/utf8.hpp"
#include "env/environment.hpp"

#include <algorithm>
#include <filesystem>

namespace sao::train {
namespace {

// The environment a config document selects, defaulting as parse_run_config does.
std::string environment_of(const nlohmann::json& document) {
  const auto env = document.find("env");
  if (env == document.end() || !env->is_object()) return config::EnvSection{}.name;
  const auto name = env->find("name");
  return name != env->end() && name->is_string() ? name->get<std::string>() : config::EnvSection{}.name;
}

// The part of a stored task section that makes it dangerous, for the message.
std::string what_it_would_run(const nlohmann::json& task) {
  constexpr size_t kShown = 200;  // a hostile checkpoint may store a long command; the start says enough
  std::string shown;
  for (const char* key : {"command", "address"}) {
    if (task.is_object() && task.contains(key)) shown = std::string("task.") + key + " " + base::dump_json(task[key]);
  }
  if (shown.empty()) shown = "task " + base::dump_json(task);
  return base::truncate_utf8(shown, kShown);
}

}  // namespace

config::RunConfig eval_run_config(const EvalConfigSources& sources) {
  const std::string stored_source = sources.checkpoint_dir + "/sao.json";
  const auto& info = sources.checkpoint_info;
  const bool has_stored = info.is_object() && info.contains("run_config");
  nlohmann::json document = has_stored ? info["run_config"] : config::default_config_document();
  if (!document.is_object())
    throw Error("checkpoint " + stored_source + ": run_config must be an object, got " + document.type_name());

  nlohmann::json user_file =
      sources.config_file.empty() ? nlohmann::json::object() : config::read_json_file(sources.config_file);
  std::error_code no_cwd;
  // As load_run_config: a file's data paths against its folder, --set's against the working directory.
  if (!sources.config_file.empty())
    config::resolve_data_paths(user_file, std::filesystem::absolute(sources.config_file, no_cwd).parent_path());
  const bool user_names_task =
      (user_file.is_object() && user_file.contains("task")) ||
      std::any_of(sources.overrides.begin(), sources.overrides.end(),
                  [](const std::string& assignment) { return config::override_section(assignment) == "task"; });

  const std::string stored_env = environment_of(document);
  const bool stored_env_untrusted =
      has_stored && !env::is_self_contained_environment(stored_env) && !sources.trust_checkpoint_env;
  const auto stored_task = document.value("task", nlohmann::json::object());
  // Emptied, not merged under the user's: no key of the stored task (a
  // command, its cwd, an address) may survive into what runs. An empty
  // object rather than none, so --set task.command=... still finds a section.
  if (stored_env_untrusted) document["task"] = nlohmann::json::object();
  // A plugin is code: a checkpoint's own is loaded only when trusted (the
  // user names one with --set env.plugin=... or a config file otherwise).
  if (has_stored && !sources.trust_checkpoint_env && document.contains("env") && document["env"].is_object())
    document["env"].erase("plugin");

  document.merge_patch(user_file);
  for (const auto& assignment : sources.overrides) config::apply_override(document, assignment);
  config::resolve_data_paths(document, std::filesystem::current_path(no_cwd));

  if (stored_env_untrusted && !user_names_task && !env::is_self_contained_environment(environment_of(document)))
    throw Error("checkpoint " + stored_source + ": its run_config uses environment '" + stored_env + "' (" +
                what_it_would_run(stored_task) +
                "); sao eval does not run programs or contact addresses named by a checkpoint. Name the "
                "environment yourself with --config FILE (env and task sections, e.g. deploy/envs/guess_number.json) "
                "or --set task=..., or pass --trust-checkpoint-env to use the checkpoint's own");
  const auto& source = sources.config_file.empty() ? stored_source : sources.config_file;
  return config::parse_run_config(document, source, config::config_sources(user_file, source, sources.overrides));
}

}  // namespace sao::train
