// Held-out evaluation speed by environment route, in the same run, on the
// same problems and the same policy (a tiny random byte model, greedy):
//
//   external, one process per episode  (process_per_episode: what every
//                                        evaluation did before the pool)
//   external, pooled                   (batch_size processes, kept from one
//                                        evaluation to the next)
//   dataset                            (the same problems from a JSONL file,
//                                        scored in process)
//
//   bench_env_routes [--episodes N] [--evaluations E] [--batch B]
//
// Each route runs E evaluations of N one-turn episodes ("12+34=" -> "46"),
// B at a time, and prints episodes/s. The external env is a 20-line Python
// script the bench writes next to the problems.
#include "base/error.hpp"
#include "env/tasks/dataset_env.hpp"
#include "env/remote/external_env.hpp"
#include "model/transformer.hpp"
#include "tokenizer/byte_tokenizer.hpp"
#include "train/episode_eval.hpp"

#include "../tests/test_tiny_model.hpp"  // the tests' smallest model

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>

namespace fs = std::filesystem;

namespace {

// Held-out episode i is line i of argv[1]; the action is scored by exact match.
const char* kFileEnv = R"PY(
import json, sys
problems = [json.loads(line) for line in open(sys.argv[1])]
answer = ""
for line in sys.stdin:
    req = json.loads(line)
    i, method = req["id"], req["method"]
    if method == "close":
        break
    if method == "reset":
        problem = problems[req.get("heldout", 0)]
        answer = problem["answer"]
        print(json.dumps({"id": i, "observation": problem["prompt"], "reward": 0.0, "terminated": False,
                          "truncated": False, "info": {}}), flush=True)
    else:
        ok = req["action"].strip() == answer
        print(json.dumps({"id": i, "observation": "", "reward": 1.0 if ok else 0.0, "terminated": True,
                          "truncated": False, "info": {"success": ok, "accuracy": 1.0 if ok else 0.0}}), flush=True)
)PY";

// Operands in [low, low + 100): the training and held-out files use
// disjoint ranges, since the dataset task refuses a problem in both.
void write_problems(const fs::path& path, int64_t count, uint64_t seed, int64_t low) {
  std::mt19937_64 rng(seed);
  std::ofstream out(path);
  for (int64_t i = 0; i < count; ++i) {
    const auto a = low + static_cast<int64_t>(rng() % 100);
    const auto b = low + static_cast<int64_t>(rng() % 100);
    out << "{\"prompt\": \"" << a << "+" << b << "=\", \"answer\": \"" << a + b << "\"}\n";
  }
}

struct Timed {
  double seconds = 0.0;
  int64_t episodes = 0;
  int64_t successes = 0;
  int64_t errors = 0;
};

Timed run_route(sao::model::CausalLM& policy, const sao::train::EnvironmentMaker& maker, int64_t evaluations,
                int64_t batch) {
  const sao::tokenizer::ByteTokenizer tokenizer;
  sao::train::EpisodeEvalOptions options;
  options.max_new_tokens = 4;
  options.batch_size = batch;
  options.sample_transcripts = 0;
  sao::train::EnvironmentPool pool;
  Timed timed;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t e = 0; e < evaluations; ++e) {
    const auto result = sao::train::evaluate_episodes(policy, tokenizer, maker, options, 1, &pool);
    timed.episodes += result.episodes;
    timed.successes += result.successes;
    timed.errors += result.errors;
  }
  pool.environments.clear();  // stopping the processes is part of the route's cost
  timed.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return timed;
}

int64_t flag(int argc, char** argv, const std::string& name, int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (argv[i] == name) return std::stoll(argv[i + 1]);
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const int64_t episodes = flag(argc, argv, "--episodes", 100);
    const int64_t evaluations = flag(argc, argv, "--evaluations", 3);
    const int64_t batch = flag(argc, argv, "--batch", 8);
    const fs::path dir = fs::temp_directory_path() / ("sao_bench_env_routes_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    write_problems(dir / "heldout.jsonl", episodes, 1, 0);
    write_problems(dir / "train.jsonl", 200, 2, 100);
    std::ofstream(dir / "file_env.py") << kFileEnv;

    torch::manual_seed(1);
    sao::model::CausalLM policy(sao_test::tiny_byte_model());

    auto external = [&](bool per_episode) {
      sao::env::ExternalConfig config;
      config.channel.command = {"python3", (dir / "file_env.py").string(), (dir / "heldout.jsonl").string()};
      config.label = "file_env.py";
      config.heldout_size = episodes;
      config.max_turns = 1;
      config.process_per_episode = per_episode;
      return [config] { return std::make_unique<sao::env::ExternalEnvironment>(config); };
    };
    const nlohmann::json dataset_config = {
        {"name", "dataset"}, {"train", (dir / "train.jsonl").string()}, {"heldout", (dir / "heldout.jsonl").string()}};
    const sao::train::EnvironmentMaker dataset = [&] {
      return sao::env::make_dataset_environment(dataset_config, "bench.task");
    };

    std::printf("held-out evaluation: %lld evaluations of %lld one-turn episodes, %lld at a time, tiny byte model\n",
                static_cast<long long>(evaluations), static_cast<long long>(episodes), static_cast<long long>(batch));
    const struct {
      const char* name;
      sao::train::EnvironmentMaker maker;
    } routes[] = {{"external, one process per episode", external(true)},
                  {"external, pooled processes", external(false)},
                  {"dataset (in process)", dataset}};
    double rates[3] = {0.0, 0.0, 0.0};
    for (size_t i = 0; i < 3; ++i) {
      const auto timed = run_route(policy, routes[i].maker, evaluations, batch);
      rates[i] = static_cast<double>(timed.episodes) / timed.seconds;
      std::printf("  %-36s %8.1f episodes/s  (%.2f s, %lld successes, %lld errors)\n", routes[i].name, rates[i],
                  timed.seconds, static_cast<long long>(timed.successes), static_cast<long long>(timed.errors));
    }
    std::printf("pooled / one process per episode: %.1fx; dataset / pooled: %.1fx\n", rates[1] / rates[0],
                rates[2] / rates[1]);
    fs::remove_all(dir);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bench_env_routes: %s\n", error.what());
    return 1;
  }
  return 0;
}
