// Environment registry and shared helpers; see environment.hpp.
#include "env/environment.hpp"

#include "base/error.hpp"
#include "base/hash.hpp"
#include "env/tasks/arithmetic_env.hpp"
#include "env/tasks/calculator_env.hpp"
#include "env/tasks/countdown_env.hpp"
#include "env/tasks/dataset_env.hpp"
#include "env/tasks/drift_env.hpp"
#include "env/tasks/example_env.hpp"
#include "env/remote/external_env.hpp"
#include "env/tasks/maze_env.hpp"
#include "env/remote/openenv_env.hpp"

#include <map>
#include <mutex>

namespace sao::env {

namespace {
struct Registry {
  std::mutex mutex;
  std::map<std::string, EnvironmentFactory> factories;
};

// Built-ins are registered on first use so static-initialisation order never matters.
Registry& registry() {
  static Registry* instance = [] {
    auto* created = new Registry();
    created->factories["arithmetic"] = make_arithmetic_environment;
    created->factories["example"] = make_example_environment;
    created->factories["maze"] = make_maze_environment;
    created->factories["drift"] = make_drift_environment;
    created->factories["external"] = make_external_environment;
    created->factories["dataset"] = make_dataset_environment;
    created->factories["openenv"] = make_openenv_environment;
    created->factories["calculator"] = make_calculator_environment;
    created->factories["countdown"] = make_countdown_environment;
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
  return name == "arithmetic" || name == "example" || name == "maze" || name == "drift" || name == "calculator" ||
         name == "countdown";
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
