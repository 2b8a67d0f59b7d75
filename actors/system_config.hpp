// How every sao process configures its CAF scheduler, so `sao train` and
// `sao node` run their light actors the same way.
#pragma once

#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>

#include <cstdint>
#include <string>

namespace sao::actors {

// threads >= 1; policy "stealing" or "sharing" (validated with the config).
inline void configure_scheduler(caf::actor_system_config& config, int64_t threads, const std::string& policy) {
  config.set("scheduler.max-threads", static_cast<size_t>(threads));
  config.set("scheduler.policy", policy == "sharing" ? caf::atom("sharing") : caf::atom("stealing"));
}

}  // namespace sao::actors
