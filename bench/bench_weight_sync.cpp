// Weight sync across processes: how long one weights::Packet takes from a
// learner-side actor to an actor in another process over CAF's middleman
// (serialise, TCP over loopback, deserialise, reply), for the default model
// and a ~100M-parameter one, next to the raw loopback TCP bandwidth measured
// in the same run. Also the parts: packing the model into one buffer (what
// the learner does per version), serialising alone, and loading the received
// tensors into a model (what a rollout actor does after receipt).
// bulk_s is the same version through the bulk channel a cluster learner
// uses (net/bulk_transfer.hpp): a notice through CAF, the bytes read from the
// learner's bulk server into a buffer the receiver keeps, the reply.
//
// Usage: bench_weight_sync [REPEATS] [CERTS]   (default 3; the median is printed)
//        bench_weight_sync --delta [STEPS]      (default 20)
//        bench_weight_sync --lora [RANK]        (default 16)
// --delta: what a bf16 replica of the SmolLM2-135M shape would be sent over
// STEPS real SAO learner steps at the default config's learning rates
// (weights/delta.hpp): per version the changed elements, delta/full bytes,
// the time to encode and to apply the delta against copying the full bf16
// image, and whether the rebuilt image matched the version's checksum.
// --lora: bytes per version of a LoRA policy of the SmolLM2-135M shape at
// RANK (default 16) for three target sets, against the full fp32 version
// (what full fine-tuning sends), with the time to pack and to load each:
// `lora/full sync bytes: X.XXXx`.
// CERTS: a directory made by `deploy/cluster-certs CERTS learner node-1`; the
// bulk channel then runs over TLS with those certificates, as in a cluster
// started with --certs.
#include "actors/cluster/cluster.hpp"
#include "actors/protocol.hpp"
#include "algo/learner.hpp"
#include "algo/trajectory.hpp"
#include "base/allocator.hpp"
#include "base/error.hpp"
#include "bench_models.hpp"
#include "config/run_config.hpp"
#include "model/lora.hpp"
#include "model/tensor_blob.hpp"
#include "model/transformer.hpp"
#include "net/bulk_transfer.hpp"
#include "report/system_info.hpp"
#include "weights/checksum.hpp"
#include "weights/delta.hpp"

#include <caf/io/all.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Raw TCP over 127.0.0.1: one thread writes `total` bytes, another reads them.
double loopback_bytes_per_second(size_t total) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::listen(listener, 1) != 0 || ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    std::perror("loopback socket");
    std::exit(1);
  }
  std::thread reader([listener, total] {
    const int connection = ::accept(listener, nullptr, nullptr);
    std::vector<char> buffer(1 << 20);
    size_t received = 0;
    while (received < total) {
      const auto got = ::read(connection, buffer.data(), buffer.size());
      if (got <= 0) break;
      received += static_cast<size_t>(got);
    }
    ::close(connection);
  });
  const int sender = ::socket(AF_INET, SOCK_STREAM, 0);
  if (::connect(sender, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    std::perror("loopback connect");
    std::exit(1);
  }
  std::vector<char> chunk(1 << 20, 'x');
  const auto start = Clock::now();
  size_t sent = 0;
  while (sent < total) {
    const auto wrote = ::write(sender, chunk.data(), std::min(chunk.size(), total - sent));
    if (wrote <= 0) break;
    sent += static_cast<size_t>(wrote);
  }
  ::close(sender);
  reader.join();
  const double seconds = seconds_since(start);
  ::close(listener);
  return static_cast<double>(total) / seconds;
}

void configure_system(caf::actor_system_config& config) {
  sao::actors::register_protocol(config);
  sao::actors::enable_cluster_networking(config);
}

constexpr const char* kBulkSecret = "bench";

// The bulk channel's certificates for one side ("" = plaintext).
sao::net::TlsFiles tls_files(const std::string& certs, const std::string& node) {
  if (certs.empty()) return {};
  return {certs + "/" + node + "/ca.crt", certs + "/" + node + "/node.crt", certs + "/" + node + "/node.key"};
}

// The receiving process: publishes an actor that answers each weight packet
// (already deserialised by CAF when the handler runs) with its byte count;
// a bulk-channel notice is answered once its bytes are read, as a rollout
// reads them, into a buffer kept from version to version.
[[noreturn]] void run_receiver(int port_pipe, const std::string& certs) {
  caf::actor_system_config config;
  configure_system(config);
  caf::actor_system system{config};
  auto receiver = system.spawn([certs]() -> caf::behavior {
    auto client = std::make_shared<std::unique_ptr<sao::net::BulkClient>>();
    auto staging = std::make_shared<std::vector<char>>();
    return {[client, staging, certs](const sao::weights::Packet& weights) {
      if (weights.route != sao::weights::Route::kBulkChannel) return static_cast<int64_t>(weights.tensors.bytes.size());
      if (!*client)
        *client = std::make_unique<sao::net::BulkClient>("127.0.0.1", weights.bulk_port, kBulkSecret, 60000,
                                                         tls_files(certs, "node-1"));
      if ((*client)->fetch(weights.version, weights.bulk_bytes, *staging) != sao::net::BulkStatus::kOk)
        return int64_t{-1};
      return static_cast<int64_t>(staging->size());
    }};
  });
  auto port = system.middleman().publish(receiver, 0, "127.0.0.1");
  const uint16_t value = port ? *port : 0;
  if (::write(port_pipe, &value, sizeof(value)) != sizeof(value)) std::_Exit(1);
  ::close(port_pipe);
  // Lives until the parent closes the connection and kills it.
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(60));
}

// A batch like a short RL step's: random prompts and answers over the whole
// vocabulary, the policy's own log-probs as behaviour, a 0/1 outcome.
std::vector<sao::algo::Trajectory> random_batch(sao::model::CausalLM& policy, int64_t batch, int64_t version,
                                                std::mt19937_64& random) {
  const auto vocab = static_cast<uint64_t>(policy->config().vocab_size);
  std::vector<sao::algo::Trajectory> trajectories;
  for (int64_t i = 0; i < batch; ++i) {
    std::vector<int64_t> prompt;
    for (int k = 0; k < 16; ++k) prompt.push_back(static_cast<int64_t>(random() % vocab));
    sao::algo::Turn turn;
    for (int k = 0; k < 32; ++k) turn.action_tokens.push_back(static_cast<int64_t>(random() % vocab));
    turn.logprobs.assign(turn.action_tokens.size(), 0.0f);
    turn.versions.assign(turn.action_tokens.size(), version);
    auto trajectory = sao::algo::make_trajectory(prompt, {turn}, static_cast<double>(random() % 2), true, i);
    sao::bench::use_own_logprobs(policy, trajectory);
    trajectories.push_back(std::move(trajectory));
  }
  return trajectories;
}

int bench_delta(int steps) {
  sao::report::configure_threads(1);
  const auto config = sao::config::load_run_config("", {});
  const auto shape = sao::bench::smollm2_135m_shape();
  sao::model::CausalLM policy(shape);
  sao::model::init_weights(*policy, 1);
  sao::model::ValueModel critic(shape);
  auto learner_config = config.learner;
  learner_config.critic_warmup_steps = 0;  // every step updates the policy
  sao::algo::Learner learner(learner_config, policy, critic);
  const int64_t batch = 4;
  std::printf(
      "delta: SmolLM2-135M shape (%lld parameters), %d SAO steps of %lld trajectories x 48 tokens, "
      "actor_lr %g, critic_lr %g (the default config's), critic warm-up off\n",
      static_cast<long long>(shape.parameter_count()), steps, static_cast<long long>(batch), learner_config.actor_lr,
      learner_config.critic_lr);
  std::printf("%8s %12s %9s %10s %10s %10s %9s %9s %11s %9s\n", "version", "changed", "changed%", "delta_MB", "full_MB",
              "delta/full", "encode_s", "apply_s", "full_copy_s", "checksum");
  std::mt19937_64 random(1);
  auto held = sao::weights::bf16_image(sao::model::pack_module(*policy), learner.policy_version());
  auto receiver = held;  // the replica's own image, rebuilt from deltas only
  std::vector<double> ratios, apply_seconds, copy_seconds;
  bool all_verified = true;
  for (int step = 0; step < steps; ++step) {
    const auto result = learner.step(random_batch(policy, batch, learner.policy_version(), random));
    if (!result.policy_updated) {
      std::printf("step %d did not update the policy\n", step + 1);
      continue;
    }
    auto next = sao::weights::bf16_image(sao::model::pack_module(*policy), learner.policy_version());
    auto start = Clock::now();
    const auto delta = sao::weights::encode_delta(held, next);
    const double encode_seconds = seconds_since(start);
    start = Clock::now();
    bool verified = true;
    try {
      sao::weights::apply_delta(receiver, delta);
    } catch (const sao::Error& error) {
      std::printf("%s\n", error.what());
      verified = false;
    }
    const double apply = seconds_since(start);
    // The full version's cost on the receiving side: copying the whole image.
    std::vector<uint16_t> copy(next.values.size());
    start = Clock::now();
    std::memcpy(copy.data(), next.values.data(), copy.size() * sizeof(uint16_t));
    const double full_copy = seconds_since(start);
    verified = verified && receiver.values == next.values;
    all_verified = all_verified && verified;
    const double full_bytes = static_cast<double>(next.values.size() * sizeof(uint16_t));
    const double ratio = static_cast<double>(delta.wire_bytes()) / full_bytes;
    ratios.push_back(ratio);
    apply_seconds.push_back(apply);
    copy_seconds.push_back(full_copy);
    std::printf("%8lld %12llu %8.3f%% %10.2f %10.2f %10.4f %9.3f %9.3f %11.3f %9s\n",
                static_cast<long long>(next.version), static_cast<unsigned long long>(delta.changed),
                100.0 * static_cast<double>(delta.changed) / static_cast<double>(next.values.size()),
                static_cast<double>(delta.wire_bytes()) / 1e6, full_bytes / 1e6, ratio, encode_seconds, apply,
                full_copy, verified ? "matched" : "MISMATCH");
    std::fflush(stdout);
    held = std::move(next);
  }
  if (ratios.empty()) return 1;
  double sum = 0;
  for (const double ratio : ratios) sum += ratio;
  const double mean = sum / static_cast<double>(ratios.size());
  std::printf("delta/full bytes per version: %.4f mean, %.4f to %.4f, over %zu versions (target <= 0.10)\n", mean,
              *std::min_element(ratios.begin(), ratios.end()), *std::max_element(ratios.begin(), ratios.end()),
              ratios.size());
  for (const int64_t anchor_every : {16, 32}) {
    // One version in `anchor_every` goes out in full.
    const double k = static_cast<double>(anchor_every);
    std::printf("with a full anchor every %lld versions: %.4f of the full bytes per version\n",
                static_cast<long long>(anchor_every), (1.0 + (k - 1.0) * mean) / k);
  }
  std::printf("apply: delta %.3f s (median) vs copying the full bf16 image %.3f s per version; checksums %s\n",
              median(apply_seconds), median(copy_seconds), all_verified ? "all matched" : "DID NOT all match");
  return all_verified ? 0 : 1;
}

struct ModelCase {
  const char* label;
  sao::model::ModelConfig config;
};

int bench_lora(int64_t rank) {
  const auto shape = sao::bench::smollm2_135m_shape();
  sao::model::CausalLM full(shape);
  auto time_it = [](const std::function<void()>& work) {
    std::vector<double> runs;
    for (int i = 0; i < 3; ++i) {
      const auto start = Clock::now();
      work();
      runs.push_back(seconds_since(start));
    }
    std::sort(runs.begin(), runs.end());
    return runs[1];
  };
  sao::model::PackedTensors full_packet;
  const double full_pack_s = time_it([&] { full_packet = sao::model::pack_module(*full); });
  sao::model::CausalLM receiver(shape);
  const double full_load_s = time_it([&] { sao::model::load_packed_into_module(*receiver, full_packet, "bench"); });
  const double full_bytes = static_cast<double>(full_packet.bytes.size());
  std::printf("SmolLM2-135M shape: %lld parameters; full fp32 version %.1f MB (pack %.3f s, load %.3f s)\n",
              static_cast<long long>(shape.parameter_count()), full_bytes / 1e6, full_pack_s, full_load_s);
  std::printf("%-40s %12s %10s %10s %10s %10s\n", ("targets (r=" + std::to_string(rank) + ")").c_str(),
              "adapter_params", "MB", "lora/full", "pack_s", "load_s");
  double headline = 0.0;
  for (const auto& targets : std::vector<std::vector<std::string>>{
           {"q_proj", "v_proj"},
           {"q_proj", "k_proj", "v_proj", "o_proj"},
           {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}}) {
    auto config = shape;
    config.lora.rank = rank;
    config.lora.targets = targets;
    sao::model::CausalLM policy(config);
    sao::model::CausalLM replica(config);
    sao::model::PackedTensors packet;
    const double pack_s = time_it([&] { packet = sao::model::pack_tensors(sao::model::lora_tensors(*policy)); });
    const double load_s = time_it([&] { sao::model::load_packed_into_module(*replica, packet, "bench"); });
    const double ratio = static_cast<double>(packet.bytes.size()) / full_bytes;
    std::string names;
    for (const auto& name : targets) names += (names.empty() ? "" : ",") + name.substr(0, name.find('_'));
    std::printf("%-40s %12lld %10.2f %10.4f %10.4f %10.4f\n", names.c_str(),
                static_cast<long long>(config.lora_parameter_count()), static_cast<double>(packet.bytes.size()) / 1e6,
                ratio, pack_s, load_s);
    if (targets.size() == 4) headline = ratio;
  }
  std::printf("lora/full sync bytes: %.4fx (r=%lld on q,k,v,o; target <= 0.02)\n", headline,
              static_cast<long long>(rank));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  sao::base::keep_freed_memory_for_reuse();  // as sao itself runs
  if (argc > 1 && std::string(argv[1]) == "--delta")
    return bench_delta(argc > 2 ? std::max(1, std::atoi(argv[2])) : 20);
  if (argc > 1 && std::string(argv[1]) == "--lora") return bench_lora(argc > 2 ? std::max(1, std::atoi(argv[2])) : 16);
  const int repeats = argc > 1 ? std::max(1, std::atoi(argv[1])) : 3;
  const std::string certs = argc > 2 ? argv[2] : "";
  // Fork first, before LibTorch or CAF start threads in this process.
  int pipe_ends[2];
  if (::pipe(pipe_ends) != 0) return 1;
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(pipe_ends[0]);
    run_receiver(pipe_ends[1], certs);
  }
  ::close(pipe_ends[1]);
  uint16_t port = 0;
  if (::read(pipe_ends[0], &port, sizeof(port)) != sizeof(port) || port == 0) {
    std::fprintf(stderr, "bench_weight_sync: the receiver process did not start\n");
    return 1;
  }
  sao::report::configure_threads(1);

  const double loopback = loopback_bytes_per_second(size_t{1} << 30);
  std::printf("loopback TCP (1 GiB, one stream): %.2f GB/s\n", loopback / 1e9);

  auto default_model = sao::config::load_run_config("", {}).model;
  auto large_model = default_model;  // ~100M parameters, same family
  large_model.hidden_size = 768;
  large_model.intermediate_size = 2048;
  large_model.num_hidden_layers = 14;
  large_model.num_attention_heads = 12;
  large_model.num_key_value_heads = 12;
  const std::vector<ModelCase> cases = {{"default", default_model}, {"~100M", large_model}};

  caf::actor_system_config config;
  configure_system(config);
  caf::actor_system system{config};
  auto receiver = system.middleman().remote_actor("127.0.0.1", port);
  if (!receiver) {
    std::fprintf(stderr, "bench_weight_sync: %s\n", system.render(receiver.error()).c_str());
    ::kill(child, SIGKILL);
    return 1;
  }
  caf::scoped_actor self{system};
  sao::net::BulkServer bulk_server("127.0.0.1", 0, kBulkSecret, 2, tls_files(certs, "learner"));
  std::printf("bulk channel: %s\n", bulk_server.encrypted() ? "TLS (certificates from the command line)" : "plaintext");
  std::printf("%-8s %12s %10s %10s %12s %10s %10s %9s %10s %10s %10s %9s\n", "model", "parameters", "MB", "pack_s",
              "serialise_s", "sync_s", "sync_GB/s", "vs_loop", "load_s", "bulk_s", "bulk_GB/s", "vs_loop");
  int64_t version = 0;
  // Sends one prepared weight message and returns the receiver's byte count
  // (-1 when the request failed, and says why).
  const auto bytes_received = [&](const caf::message& prepared) {
    int64_t received = -1;
    self->request(*receiver, std::chrono::minutes(5), prepared)
        .receive([&](int64_t count) { received = count; },
                 [&](const caf::error& error) {
                   std::fprintf(stderr, "weight sync failed: %s\n", system.render(error).c_str());
                 });
    return received;
  };
  for (const auto& item : cases) {
    sao::model::CausalLM policy(item.config);
    auto weights = sao::weights::host_packet(1, sao::model::pack_module(*policy));
    const auto bytes = static_cast<double>(weights.tensors.bytes.size());

    std::vector<double> pack, serialise, sync, load, bulk;
    std::vector<char> serialised;
    for (int r = 0; r < repeats + 1; ++r) {  // the first round warms up and is not counted
      auto start = Clock::now();
      weights.tensors = sao::model::pack_module(*policy);
      const double pack_seconds = seconds_since(start);

      // Into a buffer kept between rounds, as CAF's middleman keeps its
      // write buffer between messages.
      start = Clock::now();
      serialised.clear();
      caf::binary_serializer sink{nullptr, serialised};
      if (auto error = sink(weights)) return 1;
      const double serialise_seconds = seconds_since(start);

      // Sent as a prepared message, as the weight-sync actor sends it (one
      // message shared by every push; no copy of the weights per send).
      const auto prepared = caf::make_message(weights);
      start = Clock::now();
      if (bytes_received(prepared) != static_cast<int64_t>(bytes)) return 1;
      const double sync_seconds = seconds_since(start);

      start = Clock::now();
      sao::model::load_packed_into_module(*policy, weights.tensors, "bench");
      const double load_seconds = seconds_since(start);

      // The same version through the bulk channel, as weight-sync sends it
      // to a rollout in another process: published once, a notice sent.
      // The server owns this round's weights now (the next round packs anew).
      const auto owner = std::make_shared<sao::weights::Packet>(std::move(weights));
      sao::weights::Packet notice;
      notice.version = ++version;
      notice.route = sao::weights::Route::kBulkChannel;
      notice.tensors.index = owner->tensors.index;
      notice.bulk_port = bulk_server.port();
      notice.bulk_bytes = owner->tensors.bytes.size();
      const auto prepared_notice = caf::make_message(std::move(notice));
      start = Clock::now();
      bulk_server.publish(version, owner->tensors.bytes.data(), owner->tensors.bytes.size(), owner);
      if (bytes_received(prepared_notice) != static_cast<int64_t>(bytes)) return 1;
      const double bulk_seconds = seconds_since(start);
      if (r == 0) continue;
      pack.push_back(pack_seconds);
      serialise.push_back(serialise_seconds);
      sync.push_back(sync_seconds);
      load.push_back(load_seconds);
      bulk.push_back(bulk_seconds);
    }
    const double sync_median = median(sync);
    const double bulk_median = median(bulk);
    std::printf("%-8s %12lld %10.1f %10.4f %12.4f %10.4f %10.3f %8.1f%% %10.4f %10.4f %10.3f %8.1f%%\n", item.label,
                static_cast<long long>(item.config.parameter_count()), bytes / 1e6, median(pack), median(serialise),
                sync_median, bytes / sync_median / 1e9, 100.0 * bytes / sync_median / loopback, median(load),
                bulk_median, bytes / bulk_median / 1e9, 100.0 * bytes / bulk_median / loopback);
    std::fflush(stdout);
  }
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  return 0;
}
