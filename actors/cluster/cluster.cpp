// Cluster protocol and gatekeeper; see cluster.hpp.
#include "actors/cluster/cluster.hpp"

#include "base/atomic_file.hpp"
#include "base/constant_time.hpp"
#include "base/error.hpp"
#include "base/hash.hpp"
#include "base/json_parse.hpp"
#include "base/tcp_socket.hpp"
#include "net/tls_link.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>
#include <nlohmann/json.hpp>

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <utility>

namespace sao::actors {

namespace {

template <caf::type_id_t Id>
void describe_type(std::string& out) {
  using Type = typename caf::type_by_id<Id>::type;
  const auto value = std::make_unique<Type>();  // default value; on the heap, which keeps GCC's flow analysis quiet
  std::vector<char> bytes;
  caf::binary_serializer sink{nullptr, bytes};
  if (auto error = sink(*value)) throw Error(std::string("cannot serialise ") + caf::type_name_by_id<Id>::value);
  out += caf::type_name_by_id<Id>::value;
  out += '=' + std::to_string(bytes.size()) + ';';
}

template <caf::type_id_t Begin, caf::type_id_t... Offsets>
void describe_types(std::string& out, std::integer_sequence<caf::type_id_t, Offsets...>) {
  (describe_type<Begin + Offsets>(out), ...);
}

// Actor handles serialise through the actor system (node and actor id), so
// only their names enter the fingerprint.
template <caf::type_id_t Begin, caf::type_id_t... Offsets>
void name_types(std::string& out, std::integer_sequence<caf::type_id_t, Offsets...>) {
  ((out += std::string(caf::type_name_by_id<Begin + Offsets>::value) + ';'), ...);
}

// An unset secret admits nobody, not a node that presents an empty one.
bool same_secret(const std::string& given, const std::string& expected) {
  return !expected.empty() && base::constant_time_equal(given, expected);
}

using JoinPromise = caf::typed_response_promise<std::string, int64_t, caf::actor, caf::actor, caf::actor>;

// A join that passed the checks before the run's actors existed.
struct PendingJoin {
  JoinPromise promise;
  std::string node, role;
  caf::node_id joiner;
};

struct GatekeeperState {
  GatekeeperConfig config;
  caf::actor coordinator, replay, weight_sync;  // set by the start message
  std::vector<PendingJoin> pending;
  int64_t nodes_joined = 0;
  int64_t refusals = 0;
  static inline const char* name = "gatekeeper";
};
using GatekeeperSelf = GatekeeperActor::stateful_pointer<GatekeeperState>;

caf::error refuse(GatekeeperSelf self, const std::string& node, const std::string& why) {
  ++self->state.refusals;
  std::fprintf(stderr, "gatekeeper: refused node '%s': %s\n", node.c_str(), why.c_str());
  return msg::make_error(msg::Errc::kJoinRefused, "learner refused the join: " + why);
}

// One section of the cluster status file and the request that fills it.
struct StatusSource {
  std::string section;
  caf::actor actor;
  caf::message request;
};

// Asks each source in turn, merging the numbers of its ActorStatus into its
// section, then writes the file. A source that does not answer in time (a
// busy actor) leaves its section out of this refresh; without the error
// handler CAF's default would end the gatekeeper.
void collect_status(GatekeeperSelf self, std::shared_ptr<const std::vector<StatusSource>> sources, size_t index,
                    nlohmann::json status) {
  if (index == sources->size()) {
    status["nodes_joined"] = self->state.nodes_joined;
    status["refusals"] = self->state.refusals;
    write_status_file(self->state.config.status_path, base::dump_json(status, 2));
    return;
  }
  const auto& source = (*sources)[index];
  self->request(source.actor, std::chrono::seconds(2), source.request)
      .then(
          [self, sources, index, status](const msg::ActorStatus& reply) mutable {
            for (const auto& [key, value] : reply.numbers) status[(*sources)[index].section][key] = value;
            collect_status(self, sources, index + 1, std::move(status));
          },
          [self, sources, index, status](const caf::error&) mutable {
            collect_status(self, sources, index + 1, std::move(status));
          });
}

// The coordinator's and the cluster's numbers, weight-sync's (which version
// each rollout runs) and replay's (trajectories from each rollout): what a
// script or test reads to see which nodes contribute and what they run.
void refresh_status(GatekeeperSelf self) {
  const auto& state = self->state;
  auto sources = std::make_shared<const std::vector<StatusSource>>(std::vector<StatusSource>{
      {"coordinator", state.coordinator, caf::make_message(atoms::status_atom_v)},
      {"coordinator", state.coordinator, caf::make_message(atoms::join_atom_v, atoms::status_atom_v)},
      {"weight_sync", state.weight_sync, caf::make_message(atoms::status_atom_v)},
      {"replay", state.replay, caf::make_message(atoms::status_atom_v)}});
  collect_status(self, std::move(sources), 0, nlohmann::json::object());
}

// Admits a node unless another process connected now already uses its name
// (its actors' names, and weight-sync's bookkeeping, would collide). The same
// process asking again (a rejoin) is fine.
void admit(GatekeeperSelf self, PendingJoin join) {
  self->request(self->state.coordinator, std::chrono::seconds(10), atoms::join_atom_v, join.node)
      .then(
          [self, promise = join.promise, node = join.node, role = join.role,
           joiner = join.joiner](const caf::node_id& holder) mutable {
            if (holder != caf::node_id{} && holder != joiner) {
              promise.deliver(refuse(self, node,
                                     "the name '" + node +
                                         "' is in use by a connected node (give every node its own --name; a node "
                                         "restarted under its old name can join once the learner has seen it go)"));
              return;
            }
            auto& state = self->state;
            const int64_t number = ++state.nodes_joined;
            std::fprintf(stderr, "gatekeeper: node '%s' joined as %s node #%lld\n", node.c_str(), role.c_str(),
                         static_cast<long long>(number));
            promise.deliver(state.config.run_config_json, number, state.coordinator, state.replay, state.weight_sync);
          },
          [self, promise = join.promise, node = join.node](const caf::error& error) mutable {
            promise.deliver(refuse(self, node, "the coordinator did not answer: " + self->system().render(error)));
          });
}

GatekeeperActor::behavior_type gatekeeper_behavior(GatekeeperSelf self, GatekeeperConfig config) {
  self->state.config = std::move(config);
  return {
      [self](atoms::start_atom, const caf::actor& coordinator, const caf::actor& replay,
             const caf::actor& weight_sync) {
        auto& state = self->state;
        state.coordinator = coordinator;
        state.replay = replay;
        state.weight_sync = weight_sync;
        for (auto& join : state.pending) admit(self, std::move(join));
        state.pending.clear();
        if (!state.config.status_path.empty()) self->send(self, caf::tick_atom_v);
      },
      [self](atoms::join_atom, const std::string& node, const std::string& role, const std::string& fingerprint,
             const std::string& secret) {
        auto promise = self->make_response_promise<std::string, int64_t, caf::actor, caf::actor, caf::actor>();
        auto& state = self->state;
        if (fingerprint != state.config.fingerprint) {
          promise.deliver(refuse(self, node,
                                 "build fingerprint mismatch: learner " + state.config.fingerprint + ", node " +
                                     fingerprint +
                                     " (the two builds have different message types; build both from "
                                     "the same source)"));
        } else if (!same_secret(secret, state.config.secret)) {
          promise.deliver(refuse(self, node, "wrong cluster secret"));
        } else if (role != "rollout" && role != "env") {
          promise.deliver(refuse(self, node, "unknown role '" + role + "' (expected rollout or env)"));
        } else {
          const auto sender = self->current_sender();
          PendingJoin join{promise, node, role, sender ? sender->node() : caf::node_id{}};
          if (state.coordinator) {
            admit(self, std::move(join));
          } else {
            state.pending.push_back(std::move(join));  // the run is still starting
          }
        }
        return promise;
      },
      [self](caf::tick_atom) {
        refresh_status(self);
        self->delayed_send(self, std::chrono::seconds(1), caf::tick_atom_v);
      },
  };
}

}  // namespace

void write_status_file(const std::string& path, const std::string& text) {
  try {
    base::write_text_file_atomically(path, text + "\n");
  } catch (const Error&) {
    // A status file that cannot be written must not stop the run.
  }
}

std::string message_set_fingerprint() {
  // Protocol 2: typed actor interfaces (actors/protocol.hpp); their handles are a block of their own.
  std::string description = "sao-cluster-protocol-2;";
  describe_types<caf::id_block::sao::begin>(
      description, std::make_integer_sequence<caf::type_id_t, caf::id_block::sao::end - caf::id_block::sao::begin>{});
  name_types<caf::id_block::sao_handles::begin>(
      description, std::make_integer_sequence<caf::type_id_t,
                                              caf::id_block::sao_handles::end - caf::id_block::sao_handles::begin>{});
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(base::fnv1a64(description)));
  return hex;
}

void check_cluster_tls(const ClusterTls& tls, const std::string& flag) {
  for (const auto& file : {tls.ca_file(), tls.certificate_file(), tls.key_file()}) {
    std::ifstream in(file);
    if (!in) {
      throw Error(flag + " " + tls.dir + ": cannot read " + file +
                  " (make the directory with deploy/cluster-certs: ca.crt, node.crt, node.key)");
    }
  }
}

void require_cluster_tls(const std::string& what, const ClusterTls& tls) {
  if (tls.enabled()) return;
  throw Error(what +
              ": --certs DIR is required: every cluster port speaks TLS with the cluster's CA, on loopback too "
              "(no CAF byte is read before a peer proves it belongs). Make the directories with "
              "`deploy/cluster-certs DIR learner node-1 ...` (deploy/local-cluster does it itself)");
}

void enable_cluster_networking(caf::actor_system_config& config, const ClusterTls& tls) {
  config.load<caf::io::middleman>();
  config.set("middleman.app-identifiers", std::vector<std::string>{kClusterAppIdentifier});
  if (tls.enabled()) {
    config.load<caf::openssl::manager>();
    // With these set, CAF's OpenSSL sessions require a certificate signed by
    // the CA on both sides (SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT).
    config.openssl_certificate = tls.certificate_file();
    config.openssl_key = tls.key_file();
    config.openssl_cafile = tls.ca_file();
  }
}

std::unique_ptr<net::TlsRelay> publish_gatekeeper(caf::actor_system& system, const GatekeeperActor& gatekeeper,
                                                  const std::string& host, uint16_t port, const ClusterTls& tls,
                                                  const net::GateLimits& limits) {
  require_cluster_tls("learner node", tls);
  // CAF listens where only this machine reaches it, and with TLS there too.
  auto bound = caf::openssl::publish(gatekeeper, 0, "127.0.0.1", /*reuse=*/true);
  if (!bound) throw Error("learner node: cannot listen on 127.0.0.1 for CAF: " + system.render(bound.error()));
  return std::make_unique<net::TlsRelay>(host, port, "learner node", tls.files(), *bound, limits);
}

std::string tls_handshake_problem(const std::string& host, uint16_t port, const ClusterTls& tls) {
  std::unique_ptr<net::TlsContext> context;
  try {
    context = std::make_unique<net::TlsContext>(tls.files(), /*server=*/false, "TLS check");
  } catch (const Error& error) {
    return error.what();  // names the file that cannot be loaded
  }
  std::string unreachable;
  const int fd = base::connect_tcp(host, port, /*timeout_ms=*/10000, &unreachable);
  if (fd < 0) return "";  // unreachable: not a TLS problem (the caller retries)
  base::set_blocking_with_timeouts(fd, 0);
  std::unique_ptr<SSL, decltype(&SSL_free)> session(SSL_new(context->get()), SSL_free);
  SSL_set_fd(session.get(), fd);
  std::string problem;
  if (SSL_connect(session.get()) != 1) {
    const long verify = SSL_get_verify_result(session.get());
    problem = verify != X509_V_OK
                  ? std::string("the learner's certificate is not signed by ") + tls.ca_file() + " (" +
                        X509_verify_cert_error_string(verify) + ")"
                  : "the TLS handshake failed (is the learner started with --certs?): " + net::openssl_errors();
  } else {
    // TLS 1.3 servers check the client's certificate after the handshake
    // returns here; a refusal arrives as an alert on the first read.
    char byte = 0;
    timeval wait{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
    if (SSL_read(session.get(), &byte, 1) <= 0) {
      const auto errors = net::openssl_errors();
      if (errors.find("alert") != std::string::npos)
        problem = "the learner refused this node's certificate " + tls.certificate_file() + " (" + errors +
                  "): it is not signed by the learner's CA";
    }
    SSL_shutdown(session.get());
  }
  ::close(fd);
  return problem;
}

std::string describe_error(caf::actor_system& system, const caf::error& error) {
  return msg::error_text(system, error);
}

GatekeeperActor spawn_gatekeeper(caf::actor_system& system, GatekeeperConfig config) {
  return system.spawn(gatekeeper_behavior, std::move(config));
}

JoinResult join_learner(caf::actor_system& system, const std::string& host, uint16_t port, const JoinRequest& request,
                        const ClusterTls& tls) {
  JoinResult result;
  require_cluster_tls("node", tls);
  auto gatekeeper = caf::openssl::remote_actor<GatekeeperActor>(system, host, port);
  if (!gatekeeper) {
    result.error = "cannot reach the learner at " + host + ":" + std::to_string(port) + ": " +
                   describe_error(system, gatekeeper.error());
    if (gatekeeper.error() == caf::sec::disconnect_during_handshake) {
      // CAF says no more than that; ask OpenSSL why, so a wrong CA reads as one.
      const auto problem = tls_handshake_problem(host, port, tls);
      if (!problem.empty()) {
        result.error += ": " + problem;
        result.refused = true;  // a certificate does not get better by retrying
        return result;
      }
    }
    // Not a sao learner, or one whose handshake differs: retrying will not help.
    result.refused = gatekeeper.error() == caf::sec::incompatible_application_ids ||
                     gatekeeper.error() == caf::sec::unexpected_actor_messaging_interface;
    return result;
  }
  caf::scoped_actor self{system};
  self->request(*gatekeeper, std::chrono::seconds(10), atoms::join_atom_v, request.node, request.role,
                request.fingerprint, request.secret)
      .receive(
          [&](std::string& config_json, int64_t number, caf::actor& coordinator, caf::actor& replay,
              caf::actor& weight_sync) {
            result.ok = true;
            // The handshake uses built-in types only (see protocol.hpp); the
            // fingerprint matched, so these handles speak our interfaces.
            result.grant = {std::move(config_json), number, caf::actor_cast<CoordinatorActor>(coordinator),
                            caf::actor_cast<ReplayActor>(replay), caf::actor_cast<WeightSyncActor>(weight_sync)};
          },
          [&](caf::error& error) {
            result.error = describe_error(system, error);
            // A timeout or a dropped connection may heal; an answer from the gatekeeper will not.
            result.refused = msg::has_code(error, msg::Errc::kJoinRefused);
          });
  return result;
}

}  // namespace sao::actors
