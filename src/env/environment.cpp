// Environment registry and shared helpers; see environment.hpp.
#include "env/environment.hpp"

#include "base/error.hpp"
#include "base/hash.hpp"
#include "env/remote/external_env.hpp"
#include "env/remote/openenv_env.hpp"
#include "env/tasks/arithmetic_env.hpp"
#include "env/tasks/calculator_env.hpp"
#include "env/tasks/countdown_env.hpp"
#include "env/tasks/dataset_env.hpp"
#include "env/tasks/drift_env.hpp"
#include "env/tasks/example_env.hpp"
#include "env/tasks/maze_env.hpp"

#include <map>
#include <mutex>
#include <vector>

namespace sao::env {

namespace {
struct Registry {
  std::mutex mutex;
  std::map<std::string, EnvironmentFactory> factories;
};

// The built-in environments, each named once (its class's kName).
// Self-contained: its episodes are made in this process from the config
// alone, so a checkpoint naming it runs nothing from outside.
struct BuiltIn {
  const char* name;
  std::unique_ptr<Environment> (*make)(const nlohmann::json& config, const std::string& where);
  bool self_contained;
};
const std::vector<BuiltIn>& built_ins() {
  static const std::vector<BuiltIn> table = {
      {ArithmeticEnvironment::kName, make_arithmetic_environment, true},
      {ExampleEnvironment::kName, make_example_environment, true},
      {MazeEnvironment::kName, make_maze_environment, true},
      {DriftEnvironment::kName, make_drift_environment, true},
      {CalculatorEnvironment::kName, make_calculator_environment, true},
      {CountdownEnvironment::kName, make_countdown_environment, true},
      {DatasetEnvironment::kName, make_dataset_environment, false},
      {ExternalEnvironment::kName, make_external_environment, false},
      {OpenEnvEnvironment::kName, make_openenv_environment, false},
  };
  return table;
}

// Built-ins are registered on first use so static-initialisation order never matters.
Registry& registry() {
  static Registry* instance = [] {
    auto* created = new Registry();
    for (const auto& built_in : built_ins()) created->factories[built_in.name] = built_in.make;
    return created;
  }();
  return *instance;
}
}  // namespace

void register_environment(const std::string& name, EnvironmentFactory factory) {
  auto& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  reg.factories[name] = std::move(factory);
}

std::vector<std::string> registered_environments() {
  auto& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  std::vector<std::string> names;
  for (const auto& item : reg.factories) names.push_back(item.first);
  return names;
}

bool is_self_contained_environment(const std::string& name) {
  for (const auto& built_in : built_ins()) {
    if (name == built_in.name) return built_in.self_contained;
  }
  return false;
}

std::unique_ptr<Environment> make_environment(const std::string& name, const nlohmann::json& config,
                                              const std::string& where) {
  EnvironmentFactory factory;
  {
    auto& reg = registry();
    std::lock_guard<std::mutex> lock(reg.mutex);
    auto it = reg.factories.find(name);
    if (it != reg.factories.end()) factory = it->second;
  }
  if (!factory) {
    std::string known;
    for (const auto& registered : registered_environments()) known += (known.empty() ? "" : ", ") + registered;
    throw Error(where + ": unknown environment '" + name + "' (known: " + known + ")");
  }
  return factory(config, where);
}

}  // namespace sao::env
