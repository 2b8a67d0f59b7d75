// Env actor: owns environment instances (one per running episode, made by
// the registry from the config) and answers reset/step requests. Errors
// thrown by an environment become error responses for that episode; the
// actor itself stays up. A hung environment is detected by the caller's
// request timeout, and the coordinator restarts the actor.
#pragma once

#include "actors/protocol.hpp"

#include <nlohmann/json.hpp>

#include <string>

namespace sao::actors {

struct EnvActorConfig {
  std::string name;           // e.g. "env-0"
  std::string environment;    // registry name
  nlohmann::json env_config;  // the environment's config section
};

// Spawns the actor (state and behaviour are private to the .cpp).
EnvActor spawn_env_actor(caf::actor_system& system, EnvActorConfig config);

}  // namespace sao::actors
