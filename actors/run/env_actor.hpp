// Env actor: owns environment instances (one per running episode, made by
// the registry from the config) and answers reset/step requests. Errors
// thrown by an environment become error responses for that episode; the
// actor itself stays up. A hung environment is detected by the caller's
// request timeout, and the coordinator restarts the actor. An environment
// whose calls fail max_failures_in_a_row times in a row is dead: the actor
// answers kEnvDead from then on and the coordinator ends the run.
#pragma once

#include "actors/protocol.hpp"
#include "env/latency.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <utility>

namespace sao::actors {

struct EnvActorConfig {
  EnvActorConfig() = default;
  // Latency last and optional: most env actors have none.
  EnvActorConfig(std::string name_, std::string environment_, nlohmann::json env_config_,
                 env::LatencyModel latency_ = {}, uint64_t latency_seed_ = 0)
      : name(std::move(name_)),
        environment(std::move(environment_)),
        env_config(std::move(env_config_)),
        latency(std::move(latency_)),
        latency_seed(latency_seed_) {}

  std::string name;           // e.g. "env-0"
  std::string environment;    // registry name
  nlohmann::json env_config;  // the environment's config section
  // Simulated latency of every reset and step (env.latency*): the reply is
  // held that long without holding the actor's thread.
  env::LatencyModel latency;
  uint64_t latency_seed = 0;
  // train.max_env_failures_in_a_row: after this many failed resets/steps in
  // a row the environment is dead and every later request is answered
  // Errc::kEnvDead without calling it (env/failure_streak.hpp). 0: never.
  int64_t max_failures_in_a_row = 0;
};

// Spawns the actor (state and behaviour are private to the .cpp).
EnvActor spawn_env_actor(caf::actor_system& system, EnvActorConfig config);

}  // namespace sao::actors
