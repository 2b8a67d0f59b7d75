// One-process RL run; see train.hpp.
#include "actors/train.hpp"

#include "actors/console_server.hpp"
#include "actors/coordinator.hpp"
#include "actors/messages.hpp"

#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

namespace sao::actors {

TrainOutcome run_training(const runtime::RunConfig& config, model::CausalLM policy, const std::string& resume_from,
                          const std::atomic<bool>* stop_requested) {
  caf::actor_system_config system_config;
  register_message_types(system_config);
  system_config.set("scheduler.max-threads", static_cast<size_t>(config.train.scheduler_threads));
  TrainOutcome outcome;
  {
    caf::actor_system system{system_config};
    caf::scoped_actor self{system};
    auto coordinator = spawn_coordinator(system, CoordinatorConfig{config, policy, resume_from, self});
    std::unique_ptr<ConsoleServer> console;
    if (config.console.enabled) {
      try {
        console = std::make_unique<ConsoleServer>(system, coordinator, config.console, config.run.dir);
      } catch (const std::exception& error) {
        // Training matters more than watching it: say why, and go on without.
        std::fprintf(stderr, "console: disabled for this run: %s\n", error.what());
      }
    }
    bool finished = false;
    bool stop_sent = false;
    while (!finished) {
      self->receive(
          [&](const msg::RunFinished& done) {
            outcome.steps = done.steps;
            outcome.policy_version = done.policy_version;
            const auto newline = done.reason.find('\n');
            outcome.reason = done.reason.substr(0, newline);
            if (newline != std::string::npos) outcome.summary_json = done.reason.substr(newline + 1);
            finished = true;
          },
          caf::after(std::chrono::milliseconds(200)) >>
              [&] {
                if (stop_requested != nullptr && stop_requested->load() && !stop_sent) {
                  self->send(coordinator, atoms::stop_atom_v);
                  stop_sent = true;
                }
              });
    }
    console.reset();  // no requests into a system that is shutting down
    // Give exiting actors a moment (an env stuck in a slow call finishes it
    // first), then count what is still alive (should be 0).
    for (int i = 0; i < 250 && system.registry().running() > 1; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    outcome.actors_left_running = static_cast<int64_t>(system.registry().running()) - 1;  // minus `self`
  }
  return outcome;
}

}  // namespace sao::actors
