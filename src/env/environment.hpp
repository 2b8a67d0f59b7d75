// The environment interface: what an RL task looks like to the runtime.
// Deliberately small (reset, step, name) and text-based: an environment
// sees the policy's decoded action text and answers with the next
// observation text, a reward and whether the episode is over. Tokenizing is
// the rollout's job, so environments never depend on a vocabulary.
//
// Episodes may last many turns. Rewards may come on any turn; the outcome
// reward usually comes with the final step.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace sao::env {

struct EnvStep {
  std::string observation;  // text the policy sees next (the prompt, at reset)
  double reward = 0.0;      // reward for the action just taken (0 at reset)
  bool terminated = false;  // the episode ended on its own (next value is 0)
  bool truncated = false;   // cut by a turn/length limit (learner bootstraps)
  nlohmann::json info = nlohmann::json::object();  // e.g. {"accuracy": 1}; free-form
};

class Environment {
 public:
  virtual ~Environment() = default;
  // Starts a new episode; the same seed gives the same episode.
  virtual EnvStep reset(uint64_t seed) = 0;
  // Applies the policy's action text (without its stop token).
  virtual EnvStep step(const std::string& action) = 0;
  virtual std::string name() const = 0;
};

// Builds an environment from its config section. Throws sao::Error for bad
// config, naming `where`.
using EnvironmentFactory =
    std::function<std::unique_ptr<Environment>(const nlohmann::json& config, const std::string& where)>;

// A registry so a config names an environment by string.
void register_environment(const std::string& name, EnvironmentFactory factory);
// Throws sao::Error for an unknown name, listing the known ones.
std::unique_ptr<Environment> make_environment(const std::string& name, const nlohmann::json& config,
                                              const std::string& where);
std::vector<std::string> registered_environments();

}  // namespace sao::env
