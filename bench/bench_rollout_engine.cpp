// Continuous batching against lockstep sessions, on the same engine, the
// same policy, the same episodes (reset seeds 0..N-1) and the same sampling
// seed, in one invocation:
//   continuous  a row that ends is closed and its slot opens the next
//               episode at once (what the rollout actor does);
//   lockstep    the next `slots` episodes open only when every row of the
//               last ones has ended (what sao did before the engine).
// Environments compute their answer in the driver's thread; with
// --latency-ms L the answer is delivered L ms later (lognormal, sigma 1, as
// env.latency draws it; the same draw for the same episode and turn in both
// modes), while the engine decodes the other rows, as a rollout actor's env
// replies arrive. At L = 0 the ratio is the engine's alone: how full each
// decode step is (on a CPU a step's cost follows its rows, so little). Prints
// trajectories/s of each (median over rounds), their ratio, and the KV
// memory: the paged pool's peak storage in the continuous runs against a
// dense cache of the lockstep runs' sessions, rows x the longest row's
// context (the least any one-tensor-per-session cache holds), and against
// the rule of the lockstep DecodeSession this engine replaced (one tensor of
// rows x slots, where every decode step added a slot column for its longest
// input, reserved at the first step for its width + max_new_tokens and grown
// by doubling; with env replies arriving at different times its columns
// grow with steps, not with any row's context).
//
//   bench_rollout_engine --config config/sao_agentic.json [--checkpoint DIR]
//                        [--label maze] [--episodes 256] [--slots 32] [--rounds 3] [--seed 1]
//                        [--latency-ms 0] [--set KEY=VALUE ...]
#include "base/hash.hpp"
#include "config/run_config.hpp"
#include "env/environment.hpp"
#include "env/latency.hpp"
#include "model/checkpoint.hpp"
#include "report/system_info.hpp"
#include "rollout/episode_engine.hpp"
#include "tokenizer/load_tokenizer.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <queue>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace {

struct Options {
  std::string config_file;
  std::string checkpoint;
  std::string label = "task";
  int64_t episodes = 256;
  int64_t slots = 32;
  int64_t rounds = 3;
  uint64_t seed = 1;
  double latency_ms = 0;
  std::vector<std::string> overrides;  // --set KEY=VALUE, as sao's
};

struct RunResult {
  double seconds = 0;
  int64_t finished = 0;
  int64_t lost = 0;
  int64_t tokens = 0;
  int64_t decode_steps = 0;
  int64_t paged_peak_bytes = 0;
  int64_t paged_peak_blocks_bytes = 0;  // the blocks in use at their peak (the storage covers at least these)
  int64_t dense_bytes = 0;              // the lockstep DecodeSession's cache (lockstep runs)
  int64_t dense_floor_bytes = 0;        // rows x the longest row's context (lockstep runs)
};

sao::rollout::EnvOutcome outcome(const sao::env::EnvStep& step) {
  return sao::rollout::outcome_of(step.observation, step.reward, step.terminated, step.truncated, step.info);
}

RunResult play(sao::model::CausalLM& policy, const sao::tokenizer::Tokenizer& tokenizer,
               const sao::config::RunConfig& config, const Options& options, bool lockstep) {
  sao::rollout::EpisodeEngine engine(tokenizer, config.rollout.episode_settings(), config.model,
                                     config.rollout.engine_limits(config.model.max_position_embeddings), options.seed);
  std::vector<std::unique_ptr<sao::env::Environment>> environments;
  for (int64_t i = 0; i < options.slots; ++i) {
    environments.push_back(sao::env::make_environment(config.env.name, config.task_document, config.where("task")));
  }
  std::vector<size_t> free_environments;
  for (int64_t e = options.slots - 1; e >= 0; --e) free_environments.push_back(static_cast<size_t>(e));
  std::map<size_t, size_t> environment_of_row;
  std::map<size_t, int64_t> context_of_row;  // tokens of the row's context when it ended (lockstep memory)
  RunResult result;
  int64_t next_episode = 0;
  int64_t session_rows = 0, session_longest = 0, session_slots = 0, session_capacity = 0;
  const int64_t bytes_per_token = engine.engine().pool().bytes_per_token();
  // Env answers waiting for their simulated latency: (due, row, answer or error).
  using Clock = std::chrono::steady_clock;
  struct Reply {
    Clock::time_point due;
    size_t row;
    bool is_reset;
    sao::rollout::EnvOutcome outcome;
    std::string error;
    bool operator>(const Reply& other) const { return std::tie(due, row) > std::tie(other.due, other.row); }
  };
  std::priority_queue<Reply, std::vector<Reply>, std::greater<Reply>> replies;
  std::map<size_t, int64_t> episode_of_row;
  sao::env::LatencyModel latency;
  latency.distribution = options.latency_ms > 0 ? "lognormal" : "none";
  latency.mean_ms = options.latency_ms;
  const auto answer = [&](size_t row, bool is_reset, const std::function<sao::env::EnvStep()>& call) {
    Reply reply{Clock::now(), row, is_reset, {}, {}};
    try {
      reply.outcome = outcome(call());
    } catch (const std::exception& error) {
      reply.error = error.what();
    }
    if (latency.enabled()) {
      // The same delay for the same episode and turn in both modes.
      const auto turn = static_cast<uint64_t>(engine.row(row).turns.size()) + (is_reset ? 0 : 1);
      std::mt19937_64 rng(
          sao::base::splitmix64(options.seed ^ (static_cast<uint64_t>(episode_of_row.at(row)) << 16) ^ turn));
      reply.due += std::chrono::microseconds(static_cast<int64_t>(1000.0 * latency.draw_ms(rng)));
    }
    replies.push(std::move(reply));
  };
  const auto deliver = [&](const Reply& reply) {
    if (reply.is_reset) {
      if (reply.error.empty()) {
        engine.reset_done(reply.row, reply.outcome);
      } else {
        engine.reset_failed(reply.row, reply.error);
      }
    } else if (reply.error.empty()) {
      engine.step_done(reply.row, reply.outcome);
    } else {
      engine.step_failed(reply.row, reply.error);
    }
  };
  const auto open_next = [&] {
    if (lockstep && engine.open_rows() > 0) return;
    if (lockstep && session_rows > 0) {
      result.dense_bytes = std::max(result.dense_bytes, session_rows * session_capacity * bytes_per_token);
      result.dense_floor_bytes = std::max(result.dense_floor_bytes, session_rows * session_longest * bytes_per_token);
      session_rows = session_longest = session_slots = session_capacity = 0;
    }
    while (next_episode < options.episodes && !free_environments.empty()) {
      const size_t e = free_environments.back();
      free_environments.pop_back();
      const size_t row = engine.open();
      environment_of_row[row] = e;
      episode_of_row[row] = next_episode;
      ++session_rows;
      const auto seed = static_cast<uint64_t>(next_episode);
      answer(row, /*is_reset=*/true, [&] { return environments[e]->reset(seed); });
      ++next_episode;
    }
  };
  const auto collect = [&] {
    for (const auto row_id : engine.row_ids()) {
      const auto& row = engine.row(row_id);
      if (row.state == sao::rollout::RowState::kFinished) {
        ++result.finished;
        int64_t context = static_cast<int64_t>(row.prompt.size());
        for (const auto& turn : row.turns) {
          context += static_cast<int64_t>(turn.action_tokens.size() + turn.observation.size());
          result.tokens += static_cast<int64_t>(turn.action_tokens.size());
        }
        session_longest = std::max(session_longest, context);
      } else if (row.state == sao::rollout::RowState::kLost) {
        ++result.lost;
      } else {
        continue;
      }
      free_environments.push_back(environment_of_row.at(row_id));
      environment_of_row.erase(row_id);
      episode_of_row.erase(row_id);
      engine.close(row_id);
    }
  };
  const auto start = Clock::now();
  while (engine.open_rows() > 0 || next_episode < options.episodes) {
    while (!replies.empty() && replies.top().due <= Clock::now()) {
      const auto reply = replies.top();
      replies.pop();
      deliver(reply);
    }
    collect();
    open_next();
    if (engine.has_decode_work()) {
      ++result.decode_steps;
      const auto ended_rows = engine.decode_step(policy, 0);
      // The lockstep session's dense cache: a slot column per step for its longest input.
      const int64_t width = engine.engine().longest_input_last_step();
      if (session_capacity == 0) session_capacity = width + config.rollout.max_new_tokens;
      session_slots += width;
      while (session_slots > session_capacity) session_capacity *= 2;
      for (const auto& ended : ended_rows) {
        auto& environment = *environments[environment_of_row.at(ended.row)];
        const auto& action = ended.action_text;
        answer(ended.row, /*is_reset=*/false, [&] { return environment.step(action); });
      }
    } else if (!replies.empty()) {
      std::this_thread::sleep_until(replies.top().due);  // nothing to decode until an env answers
    }
  }
  open_next();  // closes the last lockstep session's memory account
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.paged_peak_bytes = engine.engine().stats().peak_storage_bytes;
  result.paged_peak_blocks_bytes =
      engine.engine().stats().peak_blocks_in_use * engine.engine().pool().block_size() * bytes_per_token;
  return result;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_rollout_engine: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--config") {
      options.config_file = value();
    } else if (arg == "--checkpoint") {
      options.checkpoint = value();
    } else if (arg == "--label") {
      options.label = value();
    } else if (arg == "--episodes") {
      options.episodes = std::stoll(value());
    } else if (arg == "--slots") {
      options.slots = std::stoll(value());
    } else if (arg == "--rounds") {
      options.rounds = std::stoll(value());
    } else if (arg == "--set") {
      options.overrides.push_back(value());
    } else if (arg == "--latency-ms") {
      options.latency_ms = std::stod(value());
    } else if (arg == "--seed") {
      options.seed = std::stoull(value());
    } else {
      std::fprintf(stderr, "bench_rollout_engine: unknown option %s\n", arg.c_str());
      return 2;
    }
  }
  if (options.config_file.empty() || options.episodes < 1 || options.slots < 1 || options.rounds < 1) {
    std::fprintf(stderr,
                 "usage: bench_rollout_engine --config FILE [--checkpoint DIR] [--label NAME] [--episodes N] "
                 "[--slots N] [--rounds N] [--seed N] [--latency-ms L] [--set KEY=VALUE]\n");
    return 2;
  }
  try {
    sao::report::configure_threads(1);  // LibTorch and OpenBLAS: one thread, as a rollout actor decodes
    auto config = sao::config::load_run_config(options.config_file, options.overrides);
    sao::model::CausalLM policy(config.model);
    if (!options.checkpoint.empty()) {
      policy = sao::model::load_policy_checkpoint(options.checkpoint);
      config.model = policy->config();
    } else {
      sao::model::init_weights(*policy, options.seed);
    }
    policy->eval();
    const auto tokenizer = sao::tokenizer::load_tokenizer(config.model_path, config.prompt_format);
    std::vector<double> continuous_rate, lockstep_rate;
    RunResult continuous, lockstep;
    for (int64_t round = 0; round < options.rounds; ++round) {
      // Alternated, so drift in the machine's speed touches both alike.
      continuous = play(policy, *tokenizer, config, options, /*lockstep=*/false);
      lockstep = play(policy, *tokenizer, config, options, /*lockstep=*/true);
      continuous_rate.push_back(static_cast<double>(continuous.finished) / continuous.seconds);
      lockstep_rate.push_back(static_cast<double>(lockstep.finished) / lockstep.seconds);
      std::printf(
          "round %lld: continuous %lld trajectories (%lld lost, %lld tokens, %lld steps) in %.2f s; "
          "lockstep %lld (%lld lost, %lld tokens, %lld steps) in %.2f s\n",
          static_cast<long long>(round), static_cast<long long>(continuous.finished),
          static_cast<long long>(continuous.lost), static_cast<long long>(continuous.tokens),
          static_cast<long long>(continuous.decode_steps), continuous.seconds,
          static_cast<long long>(lockstep.finished), static_cast<long long>(lockstep.lost),
          static_cast<long long>(lockstep.tokens), static_cast<long long>(lockstep.decode_steps), lockstep.seconds);
    }
    const double c = median(continuous_rate), l = median(lockstep_rate);
    std::printf("%s, %lld slots, env latency %.0f ms: continuous %.1f trajectories/s, lockstep %.1f trajectories/s\n",
                options.label.c_str(), static_cast<long long>(options.slots), options.latency_ms, c, l);
    std::printf(
        "%s kv memory: paged storage peak %.1f KiB (blocks in use at most %.1f KiB); dense, rows x the "
        "longest row's context per lockstep session, %.1f KiB; the lockstep DecodeSession's own cache %.1f KiB\n",
        options.label.c_str(), static_cast<double>(continuous.paged_peak_bytes) / 1024.0,
        static_cast<double>(continuous.paged_peak_blocks_bytes) / 1024.0,
        static_cast<double>(lockstep.dense_floor_bytes) / 1024.0, static_cast<double>(lockstep.dense_bytes) / 1024.0);
    std::printf("continuous/lockstep trajectories/s, %s: %.2fx\n", options.label.c_str(), c / l);
    std::printf("kv memory, paged/dense at equal trajectories, %s: %.2fx\n", options.label.c_str(),
                static_cast<double>(continuous.paged_peak_bytes) / static_cast<double>(lockstep.dense_floor_bytes));
    std::printf("kv memory, paged/lockstep DecodeSession cache, %s: %.2fx\n", options.label.c_str(),
                static_cast<double>(continuous.paged_peak_bytes) / static_cast<double>(lockstep.dense_bytes));
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bench_rollout_engine: %s\n", error.what());
    return 1;
  }
  return 0;
}
