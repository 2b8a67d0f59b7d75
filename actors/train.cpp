// One-process RL run; see train.hpp.
#include "actors/train.hpp"

#include "model/device.hpp"
#include "tokenizer/load_tokenizer.hpp"

#include "actors/system_config.hpp"

#include "actors/agent/agent_actor.hpp"
#include "actors/agent/agent_server.hpp"
#include "actors/console/console_server.hpp"
#include "actors/protocol.hpp"
#include "actors/run/coordinator.hpp"
#include "actors/run/learner_actor.hpp"
#include "actors/run_control.hpp"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

namespace sao::actors {

TrainOutcome await_run_finished(caf::scoped_actor& self, const CoordinatorActor& coordinator,
                                const std::atomic<bool>* stop_requested) {
  TrainOutcome outcome;
  bool finished = false;
  bool stop_sent = false;
  while (!finished) {
    self->receive(
        [&](const msg::RunFinished& done) {
          outcome.steps = done.steps;
          outcome.policy_version = done.policy_version;
          outcome.failed = done.end == msg::RunEnd::kLearnerFailed || done.end == msg::RunEnd::kGaveUp;
          outcome.reason = msg::to_string(done.end) + (done.detail.empty() ? "" : ": " + done.detail);
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
  return outcome;
}

std::string read_summary(const std::string& run_dir) {
  std::ifstream in(std::filesystem::path(run_dir) / "summary.json");
  if (!in) return "";
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::unique_ptr<ConsoleServer> start_console(caf::actor_system& system, const CoordinatorActor& coordinator,
                                             const config::RunConfig& config) {
  if (!config.console.enabled) return nullptr;
  try {
    return std::make_unique<ConsoleServer>(system, coordinator, config.console, config.run.dir);
  } catch (const std::exception& error) {
    // Training matters more than watching it: say why, and go on without.
    std::fprintf(stderr, "console: disabled for this run: %s\n", error.what());
    return nullptr;
  }
}

int64_t actors_left_running(caf::actor_system& system) {
  for (int i = 0; i < 250 && system.registry().running() > 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return static_cast<int64_t>(system.registry().running()) - 1;  // minus the caller's scoped actor
}

TrainOutcome run_training(const config::RunConfig& config, model::CausalLM policy, const std::string& resume_from,
                          const std::atomic<bool>* stop_requested) {
  // A device this process cannot use is a start-up error naming the key,
  // not an actor that fails at spawn and is restarted until the budget ends.
  model::require_device(model::parse_device(config.learner.device, "learner.device"), "learner.device");
  model::require_device(model::parse_device(config.rollout.device, "rollout.device"), "rollout.device");
  // The other learner ranks join before any actor starts (a missing rank is a start-up error).
  auto learner_ranks = join_learner_ranks(config, policy->config());
  caf::actor_system_config system_config;
  register_protocol(system_config);
  configure_scheduler(system_config, config.train.scheduler_threads, config.train.scheduler_policy);
  TrainOutcome outcome;
  {
    caf::actor_system system{system_config};
    caf::scoped_actor self{system};
    CoordinatorConfig coordinator_config{config, policy, resume_from, self, -1, nullptr, learner_ranks, EnvActor{}};
    std::unique_ptr<AgentServer> agent_server;
    if (config.agent.endpoint) {
      // Agents bring their own loop: their sessions are the episodes (actors/agent/).
      AgentActorConfig agent_config;
      agent_config.model_name = served_model_name(config);
      agent_config.session_timeout_ms = config.agent.session_timeout_s * 1000;
      agent_config.queue_timeout_ms = config.agent.queue_timeout_s * 1000;
      agent_config.max_sessions = config.agent.max_sessions;
      auto agent = spawn_agent_actor(system, agent_config);
      coordinator_config.agent_endpoint = agent;
      agent_server = std::make_unique<AgentServer>(
          system, agent, tokenizer::load_tokenizer(config.model_path, config.prompt_format), config);
    }
    auto coordinator = spawn_coordinator(system, coordinator_config);
    auto console = start_console(system, coordinator, config);
    outcome = await_run_finished(self, coordinator, stop_requested);
    outcome.summary_json = read_summary(config.run.dir);
    agent_server.reset();
    console.reset();  // no requests into a system that is shutting down
    outcome.actors_left_running = actors_left_running(system);
  }
  return outcome;
}

}  // namespace sao::actors
