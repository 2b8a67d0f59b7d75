// Cluster protocol: how a node joins a learner over CAF's middleman.
//
// The learner publishes one small actor, the gatekeeper. A node connects to
// it (caf::io::middleman::remote_actor) and sends
//   (join_atom, node name, role, build fingerprint, shared secret)
// using only CAF's built-in types, so even a build with a different set of
// sao messages can ask and read the answer. The gatekeeper refuses a wrong
// fingerprint or secret with an error that names the mismatch (and logs the
// refusal on the learner's side); otherwise it answers
//   (learner's resolved run config as JSON, node number, coordinator, replay, weight-sync)
// and the node spawns its actors and registers them with the coordinator:
//   (join_atom, rollout_atom, name, actor) / (join_atom, env_atom, name, actor).
// From then on every message is an ordinary sao message between actors.
//
// Encryption: every node has a certificate directory (deploy/cluster-certs)
// and every cluster connection is TLS, both sides showing a certificate
// signed by the cluster's CA. No CAF byte is parsed before that: the
// learner's public port belongs to sao's gate (net/tls_relay.hpp), which
// bounds connections that have not authenticated (count, per address, a
// handshake deadline, a descriptor reserve) and carries authenticated ones
// to CAF's own TLS listener on a loopback port. A crafted BASP header crashed
// CAF 0.17.6 with SIGSEGV before its handshake, one claiming 1 GiB made it
// allocate that, and 1,200 idle connections exhausted the learner's
// descriptors (issue 47). There is no plaintext mode, on loopback neither.
// The shared secret stays a second factor on top of the certificates.
#pragma once

#include "actors/cluster/cluster_tls.hpp"
#include "actors/protocol.hpp"
#include "net/tls_relay.hpp"

#include <cstdint>
#include <memory>
#include <string>

namespace sao::actors {

// A digest of the sao message set: every type of the "sao" type-ID block by
// name and by the size of its default value in CAF's binary format (a field
// added or removed changes it). Two builds interoperate iff these match.
std::string message_set_fingerprint();

// CAF's own handshake check (middleman.app-identifiers): refuses peers that
// are not sao nodes at all before any sao message is exchanged.
inline const char* kClusterAppIdentifier = "sao-cluster";

// Loads the middleman (and, with TLS, CAF's OpenSSL module with the node's
// certificate, key and CA) and sets the cluster's app identifier.
void enable_cluster_networking(caf::actor_system_config& config, const ClusterTls& tls = {});

// Opens a TLS connection to host:port with the node's certificate and CA and
// completes the handshake, only to say why it fails: "" when it succeeds,
// else OpenSSL's reason ("certificate verify failed", "tlsv1 alert unknown
// ca") with what it means. CAF itself reports any TLS failure as
// "disconnect during handshake".
std::string tls_handshake_problem(const std::string& host, uint16_t port, const ClusterTls& tls);

// The human text of an error: the context string of a sao error
// (msg::make_error), else CAF's rendering.
std::string describe_error(caf::actor_system& system, const caf::error& error);

// Replaces `path` with `text` atomically (base::write_text_file_atomically),
// so a script polling a status file never sees half a file. Best effort: a
// file that cannot be written is skipped, because a status file must not stop
// the run.
void write_status_file(const std::string& path, const std::string& text);

struct GatekeeperConfig {
  std::string secret;       // shared secret every joining node must present
  std::string fingerprint;  // message_set_fingerprint() (a test may pass another)
  std::string run_config_json;
  std::string status_path;  // cluster status JSON rewritten every second ("" = none)
};

// The entry actor the learner publishes. Its interface uses CAF's built-in
// types and atoms only (see the top of this file and protocol.hpp), so any
// sao build can ask it and read the answer; a node connects to it as this
// interface (middleman().remote_actor<GatekeeperActor>).
using GatekeeperActor =
    caf::typed_actor<caf::reacts_to<atoms::start_atom, caf::actor, caf::actor, caf::actor>,
                     caf::replies_to<atoms::join_atom, std::string, std::string, std::string,
                                     std::string>::with<std::string, int64_t, caf::actor, caf::actor, caf::actor>,
                     caf::reacts_to<caf::tick_atom>>;  // self: refresh the status file

// Spawns the entry actor the learner publishes. It is published before the
// run starts (a port in use then stops the learner before it writes
// anything); joins wait until it gets the run's actors:
//   (start_atom, coordinator, replay, weight_sync)
GatekeeperActor spawn_gatekeeper(caf::actor_system& system, GatekeeperConfig config);

// Publishes the gatekeeper with CAF's TLS on a loopback port of its own and
// opens the gate for it on host:port (the relay's port() is the cluster
// port). Throws sao::Error when `tls` is not enabled or it cannot listen.
// Keep the relay until the actor system has ended (CAF's shutdown closes the
// relayed connections from its side); its stop_accepting() closes the port
// and every connection that has not authenticated.
std::unique_ptr<net::TlsRelay> publish_gatekeeper(caf::actor_system& system, const GatekeeperActor& gatekeeper,
                                                  const std::string& host, uint16_t port, const ClusterTls& tls,
                                                  const net::GateLimits& limits = {});

// What a node gets back from a successful join.
struct JoinGrant {
  std::string run_config_json;
  int64_t node_number = 0;  // 1, 2, ... in join order; makes rollout indices unique
  CoordinatorActor coordinator;
  ReplayActor replay;
  WeightSyncActor weight_sync;
};

struct JoinRequest {
  std::string node;
  std::string role;  // "rollout" | "env"
  std::string fingerprint;
  std::string secret;
};

// Connects to the gatekeeper at host:port and joins. `refused` tells a
// refusal by the learner (retrying will not help) from an unreachable learner.
struct JoinResult {
  bool ok = false;
  bool refused = false;
  std::string error;
  JoinGrant grant;
};
JoinResult join_learner(caf::actor_system& system, const std::string& host, uint16_t port, const JoinRequest& request,
                        const ClusterTls& tls = {});

}  // namespace sao::actors
