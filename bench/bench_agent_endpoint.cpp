// The agent endpoint's throughput and its overhead over the rollout's own
// decoding, measured in the same run on the same model:
//
//   direct    a rollout actor plays one-turn episodes against an in-process
//             environment (a prompt, one answer, the end), `sessions` slots
//   endpoint  the same rollout actor behind the agent endpoint: `sessions`
//             client threads, each a loop of one chat call and one reward
//             over HTTP (the real server, the real JSON)
//
//   bench_agent_endpoint [--sessions N] [--episodes E] [--max-new-tokens T] [--rounds R]
//                        [--connection keep-alive|close]
//
// Clients keep their connection between calls (as the openai client's
// connection pool does) unless `--connection close`: then each call opens
// and ends one TCP connection (as Python's urllib does).
//
// The arms alternate for R rounds (2), so a change in the machine's load
// falls on both; the totals over the rounds give the ratio.
// Prints, per run, requests/s (chat calls answered), tokens/s (sampled
// ids, counted from the replies) and the endpoint's tokens/s over the
// direct arm's, so the overhead is a ratio from one run, not a number to
// compare across machines. The model is the default run's shape with random
// weights (sampled lengths vary; tokens/s normalises them). Threads and the
// CAF scheduler are set as `sao train` sets them.
#include "actors/agent/agent_actor.hpp"
#include "actors/agent/agent_server.hpp"
#include "actors/protocol.hpp"
#include "actors/run/env_actor.hpp"
#include "actors/run/rollout_actor.hpp"
#include "actors/run/weight_sync_actor.hpp"
#include "actors/system_config.hpp"
#include "env/environment.hpp"
#include "model/tensor_blob.hpp"
#include "report/system_info.hpp"
#include "tokenizer/load_tokenizer.hpp"
#include "weights/packet.hpp"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// One turn: the prompt, any answer, the end.
class OneTurn final : public sao::env::Environment {
 public:
  sao::env::EnvStep reset(uint64_t seed) override {
    return {std::to_string(10 + seed % 90) + "+" + std::to_string(10 + (seed / 90) % 90) + "=", 0.0, false, false};
  }
  sao::env::EnvStep step(const std::string&) override { return {"", 0.0, true, false}; }
  std::string name() const override { return "bench_one_turn"; }
};

struct Rig {
  caf::actor_system_config system_config;
  std::unique_ptr<caf::actor_system> system;
  std::unique_ptr<caf::scoped_actor> replay;
  std::unique_ptr<caf::scoped_actor> driver;
  sao::actors::WeightSyncActor weight_sync;
  sao::config::RunConfig run;

  explicit Rig(int64_t sessions, int64_t max_new_tokens) {
    sao::actors::register_protocol(system_config);
    // The run's scheduler (sao train's), not CAF's default: its polling
    // workers spent more CPU in sched_yield than the endpoint in HTTP.
    sao::actors::configure_scheduler(system_config, run.train.scheduler_threads, run.train.scheduler_policy);
    system = std::make_unique<caf::actor_system>(system_config);
    replay = std::make_unique<caf::scoped_actor>(*system);
    driver = std::make_unique<caf::scoped_actor>(*system);
    weight_sync = sao::actors::spawn_weight_sync_actor(*system);
    sao::model::CausalLM policy(run.model);
    sao::model::init_weights(*policy, 1);
    (*driver)->send(weight_sync, sao::weights::host_packet(0, sao::model::pack_module(*policy)));
    run.rollout.slots = sessions;
    run.rollout.max_new_tokens = max_new_tokens;
    run.rollout.max_turns = 1;
    run.agent.endpoint = true;
    run.agent.port = 0;
    run.run.dir = (std::filesystem::temp_directory_path() / ("sao_bench_agent_" + std::to_string(::getpid()))).string();
  }
  ~Rig() {
    caf::anon_send_exit(weight_sync, caf::exit_reason::user_shutdown);
    std::filesystem::remove_all(run.run.dir);
  }

  sao::actors::RolloutActor rollout(const sao::actors::EnvActor& env, bool agent) {
    auto config = sao::actors::rollout_config_from_run(run, "rollout-0", 0, sao::tokenizer::load_tokenizer(""));
    config.env = env;
    config.env_is_agent_endpoint = agent;
    config.replay = caf::actor_cast<sao::actors::ReplayActor>(*replay);
    config.weight_sync = weight_sync;
    config.coordinator = caf::actor_cast<sao::actors::CoordinatorActor>(*driver);
    return sao::actors::spawn_rollout_actor(*system, config);
  }

  // Takes trajectories until `count` have come; returns their action tokens.
  int64_t drain(int64_t count, const std::atomic<bool>* stop = nullptr) {
    int64_t tokens = 0;
    for (int64_t taken = 0; taken < count;) {
      bool idle = false;
      (*replay)->receive(
          [&](const sao::algo::Trajectory& trajectory) -> sao::msg::ReplayAck {
            tokens += trajectory.num_action_tokens();
            ++taken;
            return {true, 0, false, 1 << 20, true};
          },
          caf::after(std::chrono::milliseconds(200)) >> [&] { idle = true; });
      if (idle && stop != nullptr && stop->load()) break;
    }
    return tokens;
  }
};

struct Arm {
  double seconds = 0;
  int64_t episodes = 0;
  int64_t tokens = 0;
  double chat_seconds = 0;    // endpoint: summed over its chat calls, as the clients timed them
  double reward_seconds = 0;  // endpoint: summed over its reward calls
};

Arm direct_arm(int64_t sessions, int64_t episodes, int64_t max_new_tokens) {
  Rig rig(sessions, max_new_tokens);
  auto env = sao::actors::spawn_env_actor(*rig.system, {"env-0", "bench_one_turn", nlohmann::json::object()});
  auto rollout = rig.rollout(env, false);
  rig.drain(sessions);  // warm: the weights arrived and every slot ran once
  const auto start = Clock::now();
  Arm arm;
  arm.tokens = rig.drain(episodes);
  arm.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  arm.episodes = episodes;
  for (const auto& actor : {rollout.address(), env.address()})
    caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
  return arm;
}

Arm endpoint_arm(int64_t sessions, int64_t episodes, int64_t max_new_tokens, bool keep_alive) {
  Rig rig(sessions, max_new_tokens);
  sao::actors::AgentActorConfig agent_config;
  auto agent = sao::actors::spawn_agent_actor(*rig.system, agent_config);
  auto server =
      std::make_unique<sao::actors::AgentServer>(*rig.system, agent, sao::tokenizer::load_tokenizer(""), rig.run);
  auto rollout = rig.rollout(agent, true);
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> answered{0};
  std::atomic<int64_t> sampled{0};
  std::atomic<int64_t> failed{0};
  std::atomic<int64_t> chat_us{0};
  std::atomic<int64_t> reward_us{0};
  std::atomic<bool> clients_done{false};
  std::atomic<int64_t> running{sessions};
  const int64_t warm = sessions;
  const int64_t total = warm + episodes;
  auto client = [&] {
    httplib::Client http("127.0.0.1", server->port());
    http.set_read_timeout(600, 0);
    http.set_keep_alive(keep_alive);
    // As Python's http.client and the openai client do: a request written
    // in two pieces must not wait for the server's delayed ACK.
    http.set_tcp_nodelay(true);
    const httplib::Headers auth = {{"Authorization", "Bearer " + server->token()}};
    for (int64_t index = next++; index < total; index = next++) {
      const auto session = "b" + std::to_string(index);
      const nlohmann::json body = {
          {"messages",
           {{{"role", "user"},
             {"content", std::to_string(10 + index % 90) + "+" + std::to_string(10 + (index / 90) % 90) + "="}}}}};
      httplib::Headers headers = auth;
      headers.emplace("X-Session-Id", session);
      const auto chat_start = Clock::now();
      const auto reply = http.Post("/v1/chat/completions", headers, body.dump(), "application/json");
      const auto chat_end = Clock::now();
      if (!reply || reply->status != 200) {
        ++failed;
        continue;
      }
      const auto ids = nlohmann::json::parse(reply->body)["sao"]["token_ids"].size();
      const auto reward_start = Clock::now();
      const auto reward =
          http.Post(("/v1/episodes/" + session + "/reward").c_str(), auth, R"({"reward": 0})", "application/json");
      const auto reward_end = Clock::now();
      if (!reward || reward->status != 200) ++failed;
      if (index >= warm) {
        ++answered;
        sampled += static_cast<int64_t>(ids);
        chat_us += std::chrono::duration_cast<std::chrono::microseconds>(chat_end - chat_start).count();
        reward_us += std::chrono::duration_cast<std::chrono::microseconds>(reward_end - reward_start).count();
      }
    }
    if (--running == 0) clients_done = true;
  };
  std::vector<std::thread> clients;
  for (int64_t i = 0; i < sessions; ++i) clients.emplace_back(client);
  rig.drain(warm, &clients_done);
  const auto start = Clock::now();
  rig.drain(episodes, &clients_done);  // stops early only if calls failed and every client is done
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  for (auto& thread : clients) thread.join();
  if (failed > 0) std::fprintf(stderr, "bench_agent_endpoint: %lld calls failed\n", static_cast<long long>(failed));
  server.reset();
  for (const auto& actor : {rollout.address(), agent.address()})
    caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
  return {seconds, answered.load(), sampled.load(), 1e-6 * static_cast<double>(chat_us.load()),
          1e-6 * static_cast<double>(reward_us.load())};
}

}  // namespace

int main(int argc, char** argv) {
  int64_t sessions = 8;
  int64_t episodes = 200;
  int64_t max_new_tokens = 16;
  int64_t rounds = 2;
  bool keep_alive = true;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&] {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_agent_endpoint: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return std::atoll(argv[++i]);
    };
    if (arg == "--sessions") {
      sessions = value();
    } else if (arg == "--episodes") {
      episodes = value();
    } else if (arg == "--max-new-tokens") {
      max_new_tokens = value();
    } else if (arg == "--rounds") {
      rounds = value();
    } else if (arg == "--connection" && i + 1 < argc &&
               (std::string(argv[i + 1]) == "keep-alive" || std::string(argv[i + 1]) == "close")) {
      keep_alive = std::string(argv[++i]) == "keep-alive";
    } else {
      std::fprintf(stderr,
                   "usage: bench_agent_endpoint [--sessions N] [--episodes E] [--max-new-tokens T] [--rounds R] "
                   "[--connection keep-alive|close]\n");
      return 2;
    }
  }
  if (sessions < 1 || episodes < 1 || max_new_tokens < 1 || rounds < 1) {
    std::fprintf(stderr, "bench_agent_endpoint: --sessions, --episodes, --max-new-tokens and --rounds must be >= 1\n");
    return 2;
  }
  // The run's compute threads (sao train's: threads.torch_intra_op), so
  // neither arm's OpenBLAS spins on cores the other side needs.
  sao::report::configure_threads(sao::config::RunConfig{}.threads.torch_intra_op);
  sao::env::register_environment("bench_one_turn",
                                 [](const nlohmann::json&, const std::string&) { return std::make_unique<OneTurn>(); });
  // Alternating arms, so a change in the machine's load falls on both.
  Arm direct;
  Arm endpoint;
  for (int64_t round = 0; round < rounds; ++round) {
    const auto d = direct_arm(sessions, episodes, max_new_tokens);
    const auto e = endpoint_arm(sessions, episodes, max_new_tokens, keep_alive);
    std::printf("  round %lld: direct tokens/s %.1f, endpoint tokens/s %.1f\n", static_cast<long long>(round + 1),
                static_cast<double>(d.tokens) / d.seconds, static_cast<double>(e.tokens) / e.seconds);
    direct.seconds += d.seconds;
    direct.episodes += d.episodes;
    direct.tokens += d.tokens;
    endpoint.seconds += e.seconds;
    endpoint.episodes += e.episodes;
    endpoint.tokens += e.tokens;
    endpoint.chat_seconds += e.chat_seconds;
    endpoint.reward_seconds += e.reward_seconds;
  }
  const double direct_tokens_per_s = static_cast<double>(direct.tokens) / direct.seconds;
  const double endpoint_tokens_per_s = static_cast<double>(endpoint.tokens) / endpoint.seconds;
  std::printf("agent_endpoint sessions=%lld episodes=%lld x %lld rounds max_new_tokens=%lld connection=%s\n",
              static_cast<long long>(sessions), static_cast<long long>(episodes), static_cast<long long>(rounds),
              static_cast<long long>(max_new_tokens), keep_alive ? "keep-alive" : "close");
  std::printf("  direct    episodes/s %8.1f  tokens/s %8.1f\n", static_cast<double>(direct.episodes) / direct.seconds,
              direct_tokens_per_s);
  std::printf("  endpoint  requests/s %8.1f  tokens/s %8.1f\n",
              static_cast<double>(endpoint.episodes) / endpoint.seconds, endpoint_tokens_per_s);
  // Where an episode's time goes at the endpoint, as its client saw it,
  // beside a direct episode's (per session: sessions run side by side).
  std::printf("  per episode: direct %.2f ms; endpoint chat call %.2f ms + reward call %.2f ms\n",
              1e3 * direct.seconds * static_cast<double>(sessions) / static_cast<double>(direct.episodes),
              1e3 * endpoint.chat_seconds / static_cast<double>(endpoint.episodes),
              1e3 * endpoint.reward_seconds / static_cast<double>(endpoint.episodes));
  std::printf("  endpoint tokens/s / direct tokens/s = %.3f (overhead %.1f%%)\n",
              endpoint_tokens_per_s / direct_tokens_per_s, 100.0 * (1.0 - endpoint_tokens_per_s / direct_tokens_per_s));
  return 0;
}
