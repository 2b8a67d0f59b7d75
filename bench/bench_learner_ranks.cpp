// Data-parallel learner ranks on this machine: the default model's SAO step
// (K critic updates + the DIS actor update) on one rank, then on two ranks
// (this process as rank 0, a child process as rank 1, c10d Gloo over
// loopback), one LibTorch thread each, on the same batches. Prints trained
// tokens/s of both, their ratio, and how much of the two-rank step its
// collectives took. `bench/learner_ranks.sh` runs it.
//
//   bench_learner_ranks [--steps N] [--batch B]
//   bench_learner_ranks --rank R --ranks N --port P   (a follower; started by the above)
//   bench_learner_ranks --solo-share R --out FILE     (the ceiling's second half; started by the above)
//
// The ceiling: two independent one-rank learners side by side, each on its
// rank's share of every batch and with no collective at all, measure what
// two processes on this machine's cores can do at best; the two-rank
// learner is compared with it as well as with one rank.
#include "algo/learner.hpp"
#include "algo/learner_ranks.hpp"
#include "algo/length_buckets.hpp"
#include "algo/rank_group.hpp"
#include "bench_models.hpp"
#include "model/model_config.hpp"
#include "model/transformer.hpp"
#include "report/system_info.hpp"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

extern char** environ;

namespace {

int64_t flag(int argc, char** argv, const char* name, int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atoll(argv[i + 1]);
  }
  return fallback;
}

sao::algo::LearnerConfig bench_config() {
  sao::algo::LearnerConfig config;
  config.critic_warmup_steps = 0;  // every step trains both models
  config.rank_check_every = 0;     // the check is a separate cost; not part of a step
  return config;
}

struct Timing {
  double tokens = 0.0;
  double seconds = 0.0;
  double collective_seconds = 0.0;
  double compute_seconds[2] = {0.0, 0.0};  // per rank, outside collectives
};

// `warmup` untimed steps, then the rest timed.
Timing run_steps(const std::function<sao::algo::StepResult(const std::vector<sao::algo::Trajectory>&)>& step,
                 const std::vector<std::vector<sao::algo::Trajectory>>& batches, size_t warmup) {
  Timing timing;
  for (size_t i = 0; i < batches.size(); ++i) {
    const auto start = std::chrono::steady_clock::now();
    const auto result = step(batches[i]);
    if (i < warmup) continue;
    timing.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    timing.tokens += result.metrics.at("tokens");
    const auto collective = result.metrics.find("allreduce_s");
    if (collective != result.metrics.end()) timing.collective_seconds += collective->second;
    for (int r = 0; r < 2; ++r) {
      const auto compute = result.metrics.find("rank" + std::to_string(r) + "_compute_s");
      if (compute != result.metrics.end()) timing.compute_seconds[r] += compute->second;
    }
  }
  return timing;
}

sao::model::CausalLM make_policy() {
  sao::model::CausalLM policy(sao::model::ModelConfig{});
  sao::model::init_weights(*policy, 1);
  return policy;
}

sao::model::ValueModel make_critic(sao::model::CausalLM& policy) {
  sao::model::ValueModel critic(policy->config());
  sao::model::init_value_from_policy(critic, policy);
  return critic;
}

// Rank r's share of each batch (plan_rank_shares over the lengths), as batches of their own.
std::vector<std::vector<sao::algo::Trajectory>> shares_of(
    const std::vector<std::vector<sao::algo::Trajectory>>& batches, int64_t rank) {
  std::vector<std::vector<sao::algo::Trajectory>> out;
  for (const auto& batch : batches) {
    std::vector<int64_t> lengths;
    for (const auto& trajectory : batch) lengths.push_back(static_cast<int64_t>(trajectory.size()));
    std::vector<sao::algo::Trajectory> share;
    const auto shares = sao::algo::plan_rank_shares(lengths, 2);
    for (const auto row : shares[static_cast<size_t>(rank)]) {
      share.push_back(batch[static_cast<size_t>(row)]);
    }
    out.push_back(std::move(share));
  }
  return out;
}

Timing run_solo(const std::vector<std::vector<sao::algo::Trajectory>>& batches) {
  auto policy = make_policy();
  auto critic = make_critic(policy);
  sao::algo::Learner learner(bench_config(), policy, critic);
  return run_steps([&](const auto& b) { return learner.step(b); }, batches, 1);
}

pid_t spawn_self(const std::vector<std::string>& flags) {
  std::vector<std::string> args = {"/proc/self/exe"};
  args.insert(args.end(), flags.begin(), flags.end());
  std::vector<char*> argv_child;
  for (auto& arg : args) argv_child.push_back(arg.data());
  argv_child.push_back(nullptr);
  pid_t child = -1;
  if (posix_spawn(&child, "/proc/self/exe", nullptr, nullptr, argv_child.data(), environ) != 0) {
    std::fprintf(stderr, "bench_learner_ranks: cannot start a child process\n");
    std::exit(1);
  }
  return child;
}

// Rank 0 here, rank 1 a child process; returns rank 0's timing and the
// bytes of AdamW moments it holds after the last step.
Timing run_two_ranks(const sao::algo::LearnerConfig& config,
                     const std::vector<std::vector<sao::algo::Trajectory>>& batches, int64_t* state_bytes) {
  Timing two;
  pid_t child = -1;
  {
    sao::algo::RankGroupOptions options;
    options.port = 0;
    options.size = 2;
    options.timeout = std::chrono::seconds(120);
    options.on_listening = [&](uint16_t port) {
      child = spawn_self({"--rank", "1", "--ranks", "2", "--port", std::to_string(port)});
    };
    auto group = sao::algo::join_gloo_group(options);
    auto policy = make_policy();
    auto critic = make_critic(policy);
    sao::algo::send_rank_setup(*group, {{"model", sao::model::model_config_settings_to_json(policy->config())},
                                        {"learner", config.to_json()}});
    sao::algo::Learner learner(config, policy, critic, group);
    sao::algo::RankLeader leader(learner);
    leader.share_state();
    two = run_steps([&](const auto& b) { return leader.step(b); }, batches, 1);
    *state_bytes = learner.optimizer_state_bytes();
    leader.stop();
  }
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "bench_learner_ranks: rank 1 failed\n");
    std::exit(1);
  }
  return two;
}

std::vector<std::vector<sao::algo::Trajectory>> make_batches(int64_t steps, int64_t batch) {
  auto sampler = make_policy();
  std::vector<std::vector<sao::algo::Trajectory>> batches;
  for (int64_t s = 0; s < steps + 1; ++s) {
    batches.push_back(sao::bench::mixed_length_batch(sampler, batch, 100 + static_cast<uint64_t>(s)));
  }
  return batches;
}

}  // namespace

int main(int argc, char** argv) {
  sao::report::configure_threads(1);
  const int64_t rank = flag(argc, argv, "--rank", 0);
  if (rank > 0) {
    sao::algo::RankGroupOptions options;
    options.port = static_cast<uint16_t>(flag(argc, argv, "--port", 0));
    options.rank = static_cast<int>(rank);
    options.size = static_cast<int>(flag(argc, argv, "--ranks", 2));
    options.timeout = std::chrono::seconds(120);
    sao::algo::serve_learner_rank(options);
    return 0;
  }
  const int64_t steps = flag(argc, argv, "--steps", 8);
  const int64_t batch = flag(argc, argv, "--batch", 64);
  const auto batches = make_batches(steps, batch);
  const int64_t solo_share = flag(argc, argv, "--solo-share", -1);
  if (solo_share >= 0) {
    const auto timing = run_solo(shares_of(batches, solo_share));
    const char* out = nullptr;
    for (int i = 1; i + 1 < argc; ++i) {
      if (std::strcmp(argv[i], "--out") == 0) out = argv[i + 1];
    }
    if (FILE* file = out != nullptr ? std::fopen(out, "w") : nullptr) {
      std::fprintf(file, "%.9f\n", timing.seconds);
      std::fclose(file);
    }
    return 0;
  }
  const auto config = bench_config();

  Timing one;
  {
    auto policy = make_policy();
    auto critic = make_critic(policy);
    sao::algo::Learner learner(config, policy, critic);
    one = run_steps([&](const auto& b) { return learner.step(b); }, batches, 1);
  }

  int64_t replicated_bytes = 0, sharded_bytes = 0;
  const Timing two = run_two_ranks(config, batches, &replicated_bytes);
  auto zero1 = config;
  zero1.shard_optimizer = true;
  const Timing two_sharded = run_two_ranks(zero1, batches, &sharded_bytes);

  // The ceiling: both shares at once, in two processes that never talk.
  const std::string solo_file = "/tmp/bench_learner_ranks_solo_" + std::to_string(::getpid());
  const pid_t solo = spawn_self(
      {"--solo-share", "1", "--out", solo_file, "--steps", std::to_string(steps), "--batch", std::to_string(batch)});
  const auto solo0 = run_solo(shares_of(batches, 0));
  int solo_status = 0;
  waitpid(solo, &solo_status, 0);
  double solo1_seconds = 0.0;
  if (FILE* file = std::fopen(solo_file.c_str(), "r")) {
    if (std::fscanf(file, "%lf", &solo1_seconds) != 1) solo1_seconds = 0.0;
    std::fclose(file);
  }
  std::remove(solo_file.c_str());
  const double ceiling_seconds = std::max(solo0.seconds, solo1_seconds);

  const double one_rate = one.tokens / one.seconds;
  const double two_rate = two.tokens / two.seconds;
  std::printf(
      "model: sao's default (%lld parameters), batch %lld mixed-length trajectories (12-96 tokens), %lld timed "
      "steps after 1 warm-up, 1 LibTorch thread per rank\n",
      static_cast<long long>(sao::model::ModelConfig{}.parameter_count()), static_cast<long long>(batch),
      static_cast<long long>(steps));
  std::printf("learner tokens/s, 1 rank: %.0f\n", one_rate);
  std::printf("learner tokens/s, 2 ranks: %.0f\n", two_rate);
  std::printf("learner tokens/s, 2 ranks / 1 rank: %.2fx\n", two_rate / one_rate);
  std::printf("ceiling, 2 independent learners on the two shares side by side / 1 rank: %.2fx\n",
              one.seconds / ceiling_seconds);
  std::printf("learner tokens/s, 2 ranks / that ceiling: %.2f\n", ceiling_seconds / two.seconds);
  std::printf("all-reduce share of the 2-rank step: %.1f%% (%.1f ms of %.1f ms a step, rank 0)\n",
              100.0 * two.collective_seconds / two.seconds, 1e3 * two.collective_seconds / static_cast<double>(steps),
              1e3 * two.seconds / static_cast<double>(steps));
  std::printf("learner tokens/s, 2 ranks zero-1 / 2 ranks replicated: %.2fx\n",
              (two_sharded.tokens / two_sharded.seconds) / two_rate);
  std::printf("optimizer state bytes per rank, zero-1 / replicated: %.2fx (%lld of %lld bytes on rank 0)\n",
              static_cast<double>(sharded_bytes) / static_cast<double>(replicated_bytes),
              static_cast<long long>(sharded_bytes), static_cast<long long>(replicated_bytes));
  std::printf("compute outside collectives a step: rank 0 %.1f ms, rank 1 %.1f ms; 1 rank: %.1f ms\n",
              1e3 * two.compute_seconds[0] / static_cast<double>(steps),
              1e3 * two.compute_seconds[1] / static_cast<double>(steps),
              1e3 * one.seconds / static_cast<double>(steps));
  return 0;
}
