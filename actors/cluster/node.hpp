// Cluster nodes (`sao node`). A learner node runs the coordinator, learner,
// replay, weight-sync and metrics actors and publishes the gatekeeper
// (actors/cluster/cluster.hpp); rollout nodes join it, run rollout (and env) actors
// locally, and rejoin with backoff whenever they lose the learner (a learner
// restarted with --resume gets its rollouts back without touching them). Env
// nodes join the same way and offer env actors to rollouts that have none.
// CAF-free header, like train.hpp, so the CLI need not include the framework.
#pragma once

#include "actors/cluster/cluster_tls.hpp"
#include "actors/train.hpp"
#include "config/run_config.hpp"
#include "model/transformer.hpp"

#include <atomic>
#include <cstdint>
#include <string>

namespace sao::actors {

// The learner's default listening port, and so the port nodes join.
inline constexpr uint16_t kDefaultClusterPort = 7420;

struct LearnerNodeOptions {
  std::string listen_host = "127.0.0.1";
  // 0: the OS picks one (written to port_file).
  uint16_t listen_port = kDefaultClusterPort;
  std::string port_file;       // receives the bound port once the learner listens ("" = none)
  std::string secret;          // nodes must present it to join
  int64_t local_rollouts = 0;  // rollout actors in the learner's own process
  ClusterTls tls;              // certificates (deploy/cluster-certs); required
  // Weights for other processes travel beside CAF, from a bulk server on
  // listen_host at this port (net/bulk_transfer.hpp): 0 = any free port,
  // -1 = off (weights in CAF messages). TLS with the node's certificates,
  // behind the same gate as the cluster port (net/tls_gate.hpp).
  int32_t bulk_port = 0;
};

// Runs the learner side of a cluster run until its step budget or a stop
// request. RUN_DIR/cluster_status.json is rewritten every second with which
// rollouts are connected, the version each runs and the trajectories each sent.
TrainOutcome run_learner_node(const config::RunConfig& config, model::CausalLM policy, const std::string& resume_from,
                              const LearnerNodeOptions& options, const std::atomic<bool>* stop_requested);

struct WorkerNodeOptions {
  std::string role = "rollout";  // "rollout" | "env"
  std::string name;              // unique per node; its actors are "<name>/rollout-<i>", "<name>/env-<i>"
  std::string learner_host;
  uint16_t learner_port = kDefaultClusterPort;
  std::string secret;
  ClusterTls tls;        // required
  int64_t rollouts = 1;  // rollout actors on this node (role rollout)
  // Env actors on this node. Rollout node: rollout i uses env i % envs; 0 =
  // use env nodes' envs (the coordinator assigns one). Env node: >= 1.
  int64_t envs = 1;
  int64_t scheduler_threads = 2;
  std::string scheduler_policy = "sharing";
  double retry_max_seconds = 10.0;  // backoff cap between join attempts
  std::string status_file;          // this node's status, rewritten every status interval ("" = none)
};

// Joins the learner and serves it (rollouts or envs) until the learner ends
// the run (exit code 0), a stop is requested (0), or the learner refuses the
// join (2: wrong secret or incompatible build; retrying would not help).
int run_worker_node(const WorkerNodeOptions& options, const std::atomic<bool>* stop_requested);

}  // namespace sao::actors
