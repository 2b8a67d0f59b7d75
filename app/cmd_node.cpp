// `sao node`: one process of a cluster run (actors/cluster/node.hpp). The learner
// node is `sao train` with its rollouts elsewhere; rollout nodes take the run
// config from the learner when they join, so only the learner's config
// decides the model, task and algorithm.
#include "actors/cluster/node.hpp"
#include "app/commands.hpp"
#include "app/common.hpp"
#include "base/error.hpp"
#include "base/host_port.hpp"
#include "report/system_info.hpp"

#include <unistd.h>
#include <chrono>

#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace sao::cli {

namespace {

// The shared secret: --secret-file (first line), else $SAO_CLUSTER_SECRET.
// Never read from the run config, so it is not copied into RUN_DIR/config.json
// nor sent to nodes with the learner's config.
std::string cluster_secret(const ParsedArgs& parsed) {
  std::string secret;
  if (parsed.has("--secret-file")) {
    const auto path = parsed.get("--secret-file");
    std::ifstream in(path);
    if (!in) throw Error("--secret-file " + path + ": cannot open file");
    std::getline(in, secret);
    while (!secret.empty() && (secret.back() == '\r' || secret.back() == ' ')) secret.pop_back();
    if (secret.empty()) throw Error("--secret-file " + path + ": the first line is empty");
  } else if (const char* from_env = std::getenv("SAO_CLUSTER_SECRET")) {
    secret = from_env;
  }
  if (secret.empty()) {
    throw Error("a shared cluster secret is required: set SAO_CLUSTER_SECRET or pass --secret-file FILE");
  }
  return secret;
}

std::string default_node_name() {
  return report::host_process_name();
}

int run_learner(const ParsedArgs& parsed) {
  actors::LearnerNodeOptions options;
  if (parsed.has("--listen")) {
    const auto listen = base::parse_host_port(parsed.get("--listen"), "--listen");
    options.listen_host = listen.host;
    options.listen_port = listen.port;
  }
  options.port_file = parsed.get("--port-file");
  options.bulk_port = static_cast<int32_t>(parsed.get_int("--bulk-port", 0));
  if (options.bulk_port < -1 || options.bulk_port > 65535)
    throw Error("--bulk-port must be -1 (off), 0 (any free port) or a port up to 65535, got " +
                std::to_string(options.bulk_port));
  options.local_rollouts = parsed.get_int("--local-rollouts", 0);
  if (options.local_rollouts < 0 || options.local_rollouts > 1024)
    throw Error("--local-rollouts must be in [0, 1024], got " + std::to_string(options.local_rollouts));
  options.secret = cluster_secret(parsed);
  options.tls.dir = parsed.get("--certs");
  // Before the warm start: missing certificates must not cost an SFT run.
  actors::require_cluster_tls("learner node", options.tls);
  actors::check_cluster_tls(options.tls, "--certs");
  const auto started = std::chrono::steady_clock::now();
  auto start = prepare_training(parsed, "node");
  const auto& config = start.config;
  if (config.train.mode != "async") {
    throw Error("node: a cluster run needs train.mode \"async\" (sync mode sizes batches by the local rollouts)");
  }
  const auto* stop_requested = install_stop_handlers();
  std::fprintf(stderr, "node: learner, %s, %lld steps, %lld local rollout actor(s), run dir %s\n",
               algo::algorithm_name(config.learner.algorithm), static_cast<long long>(config.train.steps),
               static_cast<long long>(options.local_rollouts), config.run.dir.c_str());
  const auto outcome = actors::run_learner_node(config, start.policy, start.resume_from, options, stop_requested);
  return report_training_outcome(outcome, config, "node",
                                 std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
}

// A rollout or env node.
int run_worker(const ParsedArgs& parsed, const std::string& role) {
  if (!parsed.has("--join"))
    throw Error("node --role " + role + ": --join HOST:PORT (the learner's address) is required");
  for (const char* learner_only :
       {"--listen", "--port-file", "--bulk-port", "--local-rollouts", "--steps", "--resume"}) {
    if (parsed.has(learner_only)) throw Error(std::string(learner_only) + " is for --role learner");
  }
  if (role == "env" && parsed.has("--rollouts")) throw Error("--rollouts is for --role rollout");
  actors::WorkerNodeOptions options;
  options.role = role;
  const auto learner = base::parse_host_port(parsed.get("--join"), "--join");
  options.learner_host = learner.host;
  options.learner_port = learner.port;
  options.name = parsed.get("--name", default_node_name());
  options.rollouts = parsed.get_int("--rollouts", 1);
  options.envs = parsed.get_int("--envs", 1);
  if (options.rollouts < 1 || options.rollouts > 1024)
    throw Error("--rollouts must be in [1, 1024], got " + std::to_string(options.rollouts));
  if (options.envs < 0 || options.envs > 1024)  // rollout nodes: 0 = use env nodes' envs
    throw Error("--envs must be in [0, 1024], got " + std::to_string(options.envs));
  options.status_file = parsed.get("--status-file");
  options.secret = cluster_secret(parsed);
  options.tls.dir = parsed.get("--certs");
  // Only this node's own settings come from its config: threads and the scheduler.
  const auto config = load_config_from_args(parsed);
  report::configure_threads(config.threads.train_intra_op);
  options.scheduler_threads = config.train.scheduler_threads;
  options.scheduler_policy = config.train.scheduler_policy;
  const auto* stop_requested = install_stop_handlers();
  return actors::run_worker_node(options, stop_requested);
}

}  // namespace

int run_node(const Args& args) {
  auto specs = training_flags();
  specs.push_back({"--role", true, false, "learner | rollout | env"});
  const actors::LearnerNodeOptions learner_defaults;
  specs.push_back({"--listen", true, false,
                   "learner: ADDR:PORT to accept nodes on (default " + learner_defaults.listen_host + ":" +
                       std::to_string(learner_defaults.listen_port) + "; port 0 = any)"});
  specs.push_back({"--port-file", true, false, "learner: write the port actually bound to this file"});
  specs.push_back({"--bulk-port", true, false,
                   "learner: port on the --listen address that serves weights to other processes beside CAF "
                   "(default 0 = any free port; -1 = off; TLS with --certs)"});
  specs.push_back({"--local-rollouts", true, false, "learner: rollout actors in the learner process (default 0)"});
  specs.push_back({"--join", true, false, "rollout/env: the learner's HOST:PORT"});
  specs.push_back({"--name", true, false, "rollout/env: unique node name (default HOSTNAME-PID)"});
  specs.push_back({"--rollouts", true, false, "rollout: rollout actors on this node (default 1)"});
  specs.push_back(
      {"--envs", true, false, "rollout/env: env actors on this node (default 1; rollout 0 = use env nodes)"});
  specs.push_back({"--status-file", true, false, "rollout/env: rewrite this node's status JSON here every 2 s"});
  specs.push_back({"--secret-file", true, false, "shared cluster secret (first line); else $SAO_CLUSTER_SECRET"});
  specs.push_back({"--certs", true, false,
                   "TLS: this node's directory from deploy/cluster-certs (ca.crt, node.crt, node.key); required "
                   "(every cluster port speaks TLS, on loopback too)"});
  specs.push_back({"--insecure-plaintext", false, false, "removed: a cluster never speaks plaintext (see --certs)"});
  const auto parsed = parse_args("node", specs, args);
  if (parsed.has("--help")) {
    std::printf("usage: sao node --role learner|rollout|env [options]\n%s", flags_help(specs).c_str());
    return 0;
  }
  if (parsed.has("--insecure-plaintext")) {
    throw Error(
        "--insecure-plaintext was removed: plaintext let one crafted frame crash the learner before any check; "
        "pass --certs DIR (deploy/cluster-certs makes them)");
  }
  const auto role = parsed.get("--role");
  if (role == "learner") return run_learner(parsed);
  if (role == "rollout" || role == "env") return run_worker(parsed, role);
  throw Error("node: --role must be learner, rollout or env, got '" + role + "'");
}

}  // namespace sao::cli
