// `sao node`: one process of a cluster run (actors/cluster/node.hpp). The learner
// node is `sao train` with its rollouts elsewhere; rollout nodes take the run
// config from the learner when they join, so only the learner's config
// decides the model, task and algorithm.
#include "actors/cluster/node.hpp"
#include "algo/learner_ranks.hpp"
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

// A learner rank 1..N-1: follows rank 0 (the run's learner) over c10d; no
// actor system, no cluster secret (the rank port is c10d's, see
// learner.rank_address in the README).
int run_learner_rank(const ParsedArgs& parsed) {
  for (const char* flag : {"--rank-address", "--rank", "--ranks"}) {
    if (!parsed.has(flag)) {
      throw Error(std::string("node --role learner-rank: ") + flag +
                  " is required (rank 0 prints the command line to use when it starts)");
    }
  }
  const auto address = base::parse_host_port(parsed.get("--rank-address"), "--rank-address");
  if (address.port == 0) throw Error("--rank-address: rank 0's port, not 0");
  algo::RankGroupOptions options;
  options.host = address.host;
  options.port = address.port;
  const int64_t ranks = parsed.get_int("--ranks", 0);
  const int64_t rank = parsed.get_int("--rank", 0);
  if (ranks < 2 || ranks > 1024) throw Error("--ranks must be in [2, 1024], got " + std::to_string(ranks));
  if (rank < 1 || rank >= ranks) {
    throw Error("--rank must be in [1, " + std::to_string(ranks - 1) + "] (rank 0 is the run's learner), got " +
                std::to_string(rank));
  }
  options.rank = static_cast<int>(rank);
  options.size = static_cast<int>(ranks);
  const int64_t timeout = parsed.get_int("--rank-timeout", 300);
  if (timeout < 1 || timeout > 86400)
    throw Error("--rank-timeout must be in [1, 86400] s, got " + std::to_string(timeout));
  options.timeout = std::chrono::seconds(timeout);
  const int64_t threads = parsed.get_int("--threads", 1);
  if (threads < 1 || threads > 1024) throw Error("--threads must be in [1, 1024], got " + std::to_string(threads));
  report::configure_threads(threads);
  std::fprintf(stderr, "node: learner rank %lld of %lld, joining rank 0 at %s:%u\n", static_cast<long long>(rank),
               static_cast<long long>(ranks), address.host.c_str(), static_cast<unsigned>(address.port));
  try {
    const int64_t steps = algo::serve_learner_rank(options, parsed.get("--device"));
    std::fprintf(stderr, "node: learner rank %lld: rank 0 stopped the run after %lld steps\n",
                 static_cast<long long>(rank), static_cast<long long>(steps));
  } catch (const algo::RankFailure& failure) {
    std::fprintf(stderr, "node: learner rank %lld: %s\n", static_cast<long long>(rank), failure.what());
    return 1;
  }
  return 0;
}

}  // namespace

int run_node(const Args& args) {
  auto specs = training_flags();
  specs.push_back({"--role", true, false, "learner | rollout | env | learner-rank"});
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
  specs.push_back({"--rank-address", true, false, "learner-rank: rank 0's learner.rank_address (HOST:PORT)"});
  specs.push_back({"--rank", true, false, "learner-rank: this process's rank, 1..ranks-1"});
  specs.push_back({"--ranks", true, false, "learner-rank: learner.ranks of the run"});
  specs.push_back({"--threads", true, false, "learner-rank: LibTorch threads of this rank (default 1)"});
  specs.push_back(
      {"--rank-timeout", true, false, "learner-rank: seconds to wait for the group and each collective (300)"});
  specs.push_back(
      {"--device", true, false, "learner-rank: where this rank computes (default: rank 0's learner.device)"});
  specs.push_back({"--insecure-plaintext", false, false, "removed: a cluster never speaks plaintext (see --certs)"});
  const auto parsed = parse_args("node", specs, args);
  if (parsed.has("--help")) {
    std::printf("usage: sao node --role learner|rollout|env|learner-rank [options]\n%s", flags_help(specs).c_str());
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
  if (role == "learner-rank") return run_learner_rank(parsed);
  throw Error("node: --role must be learner, rollout, env or learner-rank, got '" + role + "'");
}

}  // namespace sao::cli
