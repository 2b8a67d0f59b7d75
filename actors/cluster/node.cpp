// Learner and rollout nodes; see node.hpp.
#include "actors/cluster/node.hpp"

#include "actors/cluster/cluster.hpp"
#include "actors/protocol.hpp"
#include "actors/run/coordinator.hpp"
#include "actors/run/env_actor.hpp"
#include "actors/run/learner_actor.hpp"
#include "actors/run/rollout_actor.hpp"
#include "actors/run_control.hpp"
#include "actors/system_config.hpp"
#include "base/error.hpp"
#include "base/hash.hpp"
#include "base/json_parse.hpp"
#include "model/device.hpp"
#include "net/bulk_transfer.hpp"
#include "net/tls_gate.hpp"
#include "net/tls_relay.hpp"
#include "tokenizer/load_tokenizer.hpp"

#include <caf/io/all.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <thread>

namespace sao::actors {

namespace {

void configure_system(caf::actor_system_config& config, int64_t scheduler_threads, const std::string& policy,
                      const ClusterTls& tls) {
  register_protocol(config);
  enable_cluster_networking(config, tls);
  configure_scheduler(config, scheduler_threads, policy);
}

}  // namespace

TrainOutcome run_learner_node(const config::RunConfig& config, model::CausalLM policy, const std::string& resume_from,
                              const LearnerNodeOptions& options, const std::atomic<bool>* stop_requested) {
  if (options.secret.empty()) throw Error("learner node: a shared secret is required");
  require_cluster_tls("learner node", options.tls);
  check_cluster_tls(options.tls, "--certs");
  // Descriptors: the gate bounds what strangers hold, and the rest of the
  // (raised) limit stays for nodes, checkpoints and metrics.
  const uint64_t descriptors = net::raise_descriptor_limit();
  std::fprintf(stderr, "learner node: %llu descriptors available\n", static_cast<unsigned long long>(descriptors));
  // The other learner ranks join before the cluster port opens (a missing rank is a start-up error).
  auto learner_ranks = join_learner_ranks(config, policy->config());
  caf::actor_system_config system_config;
  configure_system(system_config, config.train.scheduler_threads, config.train.scheduler_policy, options.tls);
  TrainOutcome outcome;
  // Outlives the actor system: CAF's shutdown closes the relayed connections
  // from its side, and their threads end then.
  std::unique_ptr<net::TlsRelay> cluster_port;
  {
    caf::actor_system system{system_config};
    caf::scoped_actor self{system};
    GatekeeperConfig gatekeeper_config;
    gatekeeper_config.secret = options.secret;
    gatekeeper_config.fingerprint = message_set_fingerprint();
    gatekeeper_config.run_config_json = base::dump_json(config.document);
    gatekeeper_config.status_path = (std::filesystem::path(config.run.dir) / "cluster_status.json").string();
    auto gatekeeper = spawn_gatekeeper(system, gatekeeper_config);
    // Listen before the run starts: a port in use must not cost a run directory.
    try {
      cluster_port = publish_gatekeeper(system, gatekeeper, options.listen_host, options.listen_port, options.tls);
    } catch (const Error&) {
      self->send_exit(gatekeeper, caf::exit_reason::user_shutdown);
      throw;
    }
    std::shared_ptr<net::BulkServer> bulk_server;
    if (options.bulk_port >= 0) {
      try {
        bulk_server = std::make_shared<net::BulkServer>(options.listen_host, static_cast<uint16_t>(options.bulk_port),
                                                        options.secret, 2, options.tls.files());
        std::fprintf(stderr, "learner node: weights for other processes on bulk port %u (TLS)\n",
                     static_cast<unsigned>(bulk_server->port()));
      } catch (const Error&) {
        self->send_exit(gatekeeper, caf::exit_reason::user_shutdown);
        throw;
      }
    }
    auto coordinator =
        spawn_coordinator(system, CoordinatorConfig{config, policy, resume_from, self, options.local_rollouts,
                                                    bulk_server, learner_ranks, EnvActor{}});
    self->request(coordinator, caf::infinite, atoms::join_atom_v)
        .receive(
            [&](ReplayActor& replay, WeightSyncActor& weight_sync) {
              // The gatekeeper hands these out in its untyped handshake (cluster.hpp).
              self->send(gatekeeper, atoms::start_atom_v, caf::actor_cast<caf::actor>(coordinator),
                         caf::actor_cast<caf::actor>(replay), caf::actor_cast<caf::actor>(weight_sync));
            },
            [&](caf::error&) {});  // a coordinator that failed to start reports RunFinished below
    const uint16_t bound_port = cluster_port->port();
    std::fprintf(stderr, "learner node: listening on %s:%u (TLS, build fingerprint %s)\n", options.listen_host.c_str(),
                 static_cast<unsigned>(bound_port), gatekeeper_config.fingerprint.c_str());
    if (!bulk_server) std::fprintf(stderr, "learner node: weights travel in CAF messages (--bulk-port -1)\n");
    if (!options.port_file.empty()) write_status_file(options.port_file, std::to_string(bound_port));
    auto console = start_console(system, coordinator, config);
    outcome = await_run_finished(self, coordinator, stop_requested);
    outcome.summary_json = read_summary(config.run.dir);
    console.reset();  // no requests into a system that is shutting down
    // No new connection from here on, and the ones that never authenticated
    // are closed: nothing held by a stranger outlives the run.
    cluster_port->stop_accepting();
    if (const auto gate = cluster_port->stats(); gate.accepted > gate.admitted) {
      std::fprintf(stderr,
                   "learner node: cluster port: %lld connection(s), %lld authenticated; %lld closed for room, %lld "
                   "past the handshake deadline, %lld failed the handshake, %lld refused for the descriptor reserve\n",
                   static_cast<long long>(gate.accepted), static_cast<long long>(gate.admitted),
                   static_cast<long long>(gate.evicted), static_cast<long long>(gate.timed_out),
                   static_cast<long long>(gate.failed_handshake), static_cast<long long>(gate.refused_reserve));
    }
    self->send_exit(gatekeeper, caf::exit_reason::user_shutdown);
    outcome.actors_left_running = actors_left_running(system);
  }
  return outcome;
}

namespace {

// One membership of a rollout node: the actors it spawned after a join.
struct NodeSession {
  JoinGrant grant;
  std::vector<EnvActor> envs;
  std::vector<RolloutActor> rollouts;
  std::set<caf::actor_addr> exited;  // local actors whose down message was already received
  std::vector<StatusActor> local() const {
    std::vector<StatusActor> all(envs.begin(), envs.end());
    all.insert(all.end(), rollouts.begin(), rollouts.end());
    return all;
  }
};

NodeSession start_node_session(caf::actor_system& system, caf::scoped_actor& self, const WorkerNodeOptions& options,
                               JoinGrant grant) {
  const auto document = nlohmann::json::parse(grant.run_config_json);
  const auto run = config::parse_run_config(document, "the learner's run config");
  if (options.role == "rollout") {
    // The run's rollout.device applies to every rollout node: one without
    // that device says so and stops, instead of failing its actors.
    model::require_device(model::parse_device(run.rollout.device, "rollout.device"),
                          "node " + options.name + ": rollout.device (from the learner's run config)");
  }
  NodeSession session;
  session.grant = std::move(grant);
  auto& coordinator = session.grant.coordinator;
  for (int64_t e = 0; e < options.envs; ++e) {
    const std::string name = options.name + "/env-" + std::to_string(e);
    EnvActorConfig env_config{name, run.env.name, run.task_document, run.env.latency,
                              base::splitmix64(static_cast<uint64_t>(run.run.seed) ^ std::hash<std::string>{}(name))};
    env_config.max_failures_in_a_row = run.train.max_env_failures_in_a_row;
    session.envs.push_back(spawn_env_actor(system, env_config));
    // Registered so that drifting environments hear the learner's step; an
    // env node's envs also serve rollouts that have none.
    const bool from_env_node = options.role == "env";
    self->send(coordinator, atoms::join_atom_v, atoms::env_atom_v, name, session.envs.back(), from_env_node);
  }
  const int64_t rollouts = options.role == "rollout" ? options.rollouts : 0;
  const auto shared_tokenizer = rollouts > 0 ? tokenizer::load_tokenizer(run.model_path, run.prompt_format) : nullptr;
  // One reader for the node: each weight version is downloaded once.
  auto bulk_reader = std::make_shared<net::SharedBulkReader>(options.learner_host, options.secret,
                                                             /*timeout_ms=*/60000, options.tls.files());
  for (int64_t r = 0; r < rollouts; ++r) {
    const std::string name = options.name + "/rollout-" + std::to_string(r);
    // Node numbers are unique per learner, so these indices are unique across the run.
    auto config = rollout_config_from_run(run, name, session.grant.node_number * 1000 + r, shared_tokenizer);
    const bool needs_env = session.envs.empty();  // the coordinator assigns an env node's env
    if (!needs_env) config.env = session.envs[static_cast<size_t>(r % options.envs)];
    config.replay = session.grant.replay;
    config.weight_sync = session.grant.weight_sync;
    config.bulk_reader = bulk_reader;
    config.coordinator = coordinator;
    session.rollouts.push_back(spawn_rollout_actor(system, config));
    self->send(coordinator, atoms::join_atom_v, atoms::rollout_atom_v, name, session.rollouts.back(), needs_env);
  }
  self->monitor(coordinator);
  for (auto& actor : session.local()) self->monitor(actor);
  return session;
}

void stop_session(caf::scoped_actor& self, NodeSession& session) {
  self->demonitor(session.grant.coordinator.address());
  auto local = session.local();
  for (auto& actor : local) self->send_exit(actor, caf::exit_reason::user_shutdown);
  // Wait for their down messages, so the next session starts from a clean slate.
  bool timed_out = false;
  while (session.exited.size() < local.size() && !timed_out) {
    self->receive(
        [&](const caf::down_msg& down) {
          for (auto& actor : local) {
            if (actor.address() == down.source) session.exited.insert(down.source);
          }
        },
        caf::after(std::chrono::seconds(10)) >> [&] { timed_out = true; });
  }
  session = NodeSession{};
}

// One line per local actor on stdout (and the status file): what a person or
// a test watching the node reads to see it contribute.
void report_status(caf::scoped_actor& self, const WorkerNodeOptions& options, const NodeSession& session) {
  static const std::map<std::string, std::vector<std::string>> kShown = {
      {"rollout", {"policy_version", "episodes_done", "episodes_lost", "tokens_per_s"}},
      {"env", {"open_episodes", "errors"}}};
  nlohmann::json status = {{"node", options.name}, {"node_number", session.grant.node_number}};
  for (const auto& actor : session.local()) {
    self->request(actor, std::chrono::seconds(2), atoms::status_atom_v)
        .receive(
            [&](const msg::ActorStatus& reply) {
              status["actors"][reply.name] = reply.numbers;
              status["actors"][reply.name]["messages_handled"] = reply.messages_handled;
              std::string line = "node " + options.name + ": " + reply.name + " messages_handled " +
                                 std::to_string(reply.messages_handled);
              auto shown = kShown.find(reply.kind);
              if (shown == kShown.end()) return;
              for (const auto& key : shown->second) {
                auto it = reply.numbers.find(key);
                if (it != reply.numbers.end()) line += " " + key + " " + std::to_string(std::llround(it->second));
              }
              std::printf("%s\n", line.c_str());
            },
            [&](const caf::error&) {});
  }
  std::fflush(stdout);
  if (!options.status_file.empty()) write_status_file(options.status_file, base::dump_json(status, 2));
}

bool sleep_unless_stopped(double seconds, const std::atomic<bool>* stop_requested) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    if (stop_requested != nullptr && stop_requested->load()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

enum class SessionEnd { kRunFinished, kLearnerLost, kLocalFailure, kStopRequested };

// Runs one joined session until something ends it.
SessionEnd serve(caf::actor_system& system, caf::scoped_actor& self, const WorkerNodeOptions& options,
                 NodeSession& session, const std::atomic<bool>* stop_requested) {
  const auto status_every = std::chrono::seconds(2);
  auto next_status = std::chrono::steady_clock::now() + status_every;
  std::optional<SessionEnd> end;
  while (!end) {
    self->receive(
        [&](const caf::down_msg& down) {
          const std::string why = system.render(down.reason);
          if (down.source != session.grant.coordinator.address()) session.exited.insert(down.source);
          if (down.source == session.grant.coordinator.address()) {
            if (down.reason == caf::exit_reason::normal) {
              end = SessionEnd::kRunFinished;
            } else {
              std::fprintf(stderr, "node %s: lost the learner (%s)\n", options.name.c_str(), why.c_str());
              end = SessionEnd::kLearnerLost;
            }
          } else if (down.reason == caf::exit_reason::user_shutdown) {
            // The coordinator shuts remote actors down this way when the run ends.
            end = SessionEnd::kRunFinished;
          } else {
            std::fprintf(stderr, "node %s: a local actor exited (%s); restarting this node's actors\n",
                         options.name.c_str(), why.c_str());
            end = SessionEnd::kLocalFailure;
          }
        },
        caf::after(std::chrono::milliseconds(200)) >> [] {});
    if (end) break;
    if (stop_requested != nullptr && stop_requested->load()) end = SessionEnd::kStopRequested;
    if (std::chrono::steady_clock::now() >= next_status) {
      report_status(self, options, session);
      next_status = std::chrono::steady_clock::now() + status_every;
    }
  }
  return *end;
}

}  // namespace

int run_worker_node(const WorkerNodeOptions& options, const std::atomic<bool>* stop_requested) {
  const std::string what = options.role + " node";
  if (options.role != "rollout" && options.role != "env") throw Error("node: unknown role '" + options.role + "'");
  if (options.secret.empty()) throw Error(what + ": a shared secret is required");
  if (options.role == "rollout" && (options.rollouts < 1 || options.envs < 0)) {
    throw Error("rollout node: --rollouts must be >= 1 and --envs >= 0");
  }
  if (options.role == "env" && options.envs < 1) throw Error("env node: --envs must be >= 1");
  require_cluster_tls(what, options.tls);
  check_cluster_tls(options.tls, "--certs");
  caf::actor_system_config system_config;
  configure_system(system_config, options.scheduler_threads, options.scheduler_policy, options.tls);
  caf::actor_system system{system_config};
  caf::scoped_actor self{system};
  const JoinRequest request{options.name, options.role, message_set_fingerprint(), options.secret};
  double backoff = 0.25;
  while (stop_requested == nullptr || !stop_requested->load()) {
    auto joined = join_learner(system, options.learner_host, options.learner_port, request, options.tls);
    if (!joined.ok) {
      std::fprintf(stderr, "node %s: %s\n", options.name.c_str(), joined.error.c_str());
      if (joined.refused) return 2;
      std::fprintf(stderr, "node %s: retrying in %.2g s\n", options.name.c_str(), backoff);
      if (!sleep_unless_stopped(backoff, stop_requested)) break;
      backoff = std::min(backoff * 2, options.retry_max_seconds);
      continue;
    }
    backoff = 0.25;
    std::fprintf(stderr, "node %s: joined the learner at %s:%u as %s node #%lld\n", options.name.c_str(),
                 options.learner_host.c_str(), static_cast<unsigned>(options.learner_port), options.role.c_str(),
                 static_cast<long long>(joined.grant.node_number));
    auto session = start_node_session(system, self, options, std::move(joined.grant));
    const auto end = serve(system, self, options, session, stop_requested);
    stop_session(self, session);
    if (end == SessionEnd::kRunFinished)
      std::fprintf(stderr, "node %s: the learner ended the run\n", options.name.c_str());
    if (end == SessionEnd::kRunFinished || end == SessionEnd::kStopRequested) break;
  }
  std::fprintf(stderr, "node %s: stopped\n", options.name.c_str());
  return 0;
}

}  // namespace sao::actors
