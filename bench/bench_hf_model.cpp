// A Hugging Face model directory on this machine: load time and memory, KV-
// cache decode and a full SAO learner step, in tokens/s and as a fraction
// of the fp32 matmul rate measured in the same run. Without a directory it
// makes one of SmolLM2-135M's shape (hidden 576, 30 layers, 9 heads, 3 KV
// heads, intermediate 1536, vocab 49152, tied; random weights, bf16 in
// shards as the Hub ships it) with the tokenizer files of --tokenizer DIR;
// --keep OUT writes it to OUT and leaves it there (for `sao sft --model OUT`).
//
// Usage: bench_hf_model [--model DIR | --tokenizer DIR [--keep OUT]] [--threads N] [--batch B]
#include "algo/learner.hpp"
#include "algo/trajectory.hpp"
#include "base/allocator.hpp"
#include "bench_models.hpp"
#include "config/run_config.hpp"
#include "model/checkpoint.hpp"
#include "model/generation.hpp"
#include "model/hf_export.hpp"
#include "model/transformer.hpp"
#include "model_flops.hpp"
#include "report/system_info.hpp"
#include "tokenizer/load_tokenizer.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

namespace {

namespace fs = std::filesystem;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double peak_rss_gb() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0 / 1e9;  // ru_maxrss is in KiB on Linux
}

std::string flag(int argc, char** argv, const std::string& name, const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (argv[i] == name) return argv[i + 1];
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  sao::base::keep_freed_memory_for_reuse();  // as sao itself runs
  const int64_t threads = std::atoll(flag(argc, argv, "--threads", "2").c_str());
  const int64_t batch = std::atoll(flag(argc, argv, "--batch", "8").c_str());
  std::string model_dir = flag(argc, argv, "--model", "");
  const std::string tokenizer_dir = flag(argc, argv, "--tokenizer", "");
  fs::path made;
  if (model_dir.empty()) {
    if (tokenizer_dir.empty()) {
      std::fprintf(stderr, "usage: bench_hf_model --model DIR | --tokenizer DIR (a directory with tokenizer.json)\n");
      return 2;
    }
    const std::string keep = flag(argc, argv, "--keep", "");
    made = keep.empty() ? fs::temp_directory_path() / ("sao_bench_hf_model_" + std::to_string(::getpid()))
                        : fs::path(keep);
    sao::model::CausalLM policy(sao::bench::smollm2_135m_shape());
    sao::model::init_weights(*policy, 1);
    sao::model::HfExportOptions options;
    options.dtype = torch::kBFloat16;
    options.max_shard_bytes = 100'000'000;
    for (const char* name : {"tokenizer.json", "tokenizer_config.json"})
      if (fs::exists(fs::path(tokenizer_dir) / name))
        options.copy_files.push_back((fs::path(tokenizer_dir) / name).string());
    const auto report = sao::model::export_hf_directory(policy, made.string(), options);
    std::printf("made %s: SmolLM2-135M shape, random weights, %zu bf16 shards, %.0f MB\n", made.c_str(),
                report.weight_files.size(), static_cast<double>(report.weight_bytes) / 1e6);
    model_dir = made.string();
  }
  const double rss_before = peak_rss_gb();
  sao::report::configure_threads(threads);
  const double limit = sao::report::measure_matmul_gflops(1024, 5);
  std::printf("machine: %s, %lld threads, fp32 matmul 1024^2 = %.1f GFLOP/s (the limit below)\n",
              sao::report::detect_blas().name.c_str(), static_cast<long long>(threads), limit);

  auto start = std::chrono::steady_clock::now();
  auto policy = sao::model::load_policy_checkpoint(model_dir);
  const double load_seconds = seconds_since(start);
  const auto& config = policy->config();
  std::printf("loaded %s: %s, %lld parameters (%.2f GB as fp32) in %.2f s; peak RSS %.2f GB (%.2f GB before)\n",
              model_dir.c_str(), config.model_type.c_str(), static_cast<long long>(config.parameter_count()),
              4e-9 * static_cast<double>(config.parameter_count()), load_seconds, peak_rss_gb(), rss_before);
  const auto tokenizer = sao::tokenizer::load_tokenizer(model_dir);

  std::mt19937_64 random(3);
  auto prompt = [&] {
    const auto a = random() % 900 + 100;
    const auto b = random() % 900 + 100;
    return tokenizer->first_turn(std::to_string(a) + "+" + std::to_string(b) + "=", "");
  };
  for (const int64_t rows : {int64_t{1}, batch}) {
    sao::model::SamplingConfig sampling;
    sampling.max_new_tokens = 32;
    sampling.stop_tokens = {};  // every row decodes the full budget
    std::vector<std::vector<int64_t>> prompts;
    for (int64_t i = 0; i < rows; ++i) prompts.push_back(prompt());
    sao::model::generate(policy, prompts, sampling, 1);  // warm-up
    start = std::chrono::steady_clock::now();
    sao::model::generate(policy, prompts, sampling, 2);
    const double elapsed = seconds_since(start);
    const double tokens = static_cast<double>(rows * sampling.max_new_tokens);
    const double context = static_cast<double>(prompts[0].size()) + sampling.max_new_tokens / 2.0;
    const double achieved = sao::bench::forward_flops_per_token(config, context) * tokens / elapsed / 1e9;
    std::printf("decode batch %3lld, 32 new tokens: %7.1f tokens/s, %6.2f GFLOP/s = %5.1f%% of the matmul limit\n",
                static_cast<long long>(rows), tokens / elapsed, achieved, 100.0 * achieved / limit);
  }

  // A full SAO step on trajectories the policy sampled: the critic starts as
  // a copy of the backbone with a fresh head, as in a run.
  sao::model::ValueModel critic(config);
  sao::model::init_value_from_policy(critic, policy);
  auto learner_config = sao::config::load_run_config("", {}).learner;
  learner_config.critic_warmup_steps = 0;
  sao::algo::Learner learner(learner_config, policy, critic);
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t i = 0; i < batch; ++i) prompts.push_back(prompt());
  sao::model::SamplingConfig sampling;
  sampling.max_new_tokens = 16;
  const auto sequences = sao::model::generate(policy, prompts, sampling, 5);
  std::vector<sao::algo::Trajectory> trajectories;
  double tokens = 0;
  for (size_t i = 0; i < sequences.size(); ++i) {
    trajectories.push_back(
        sao::algo::trajectory_from_generation(prompts[i], sequences[i], static_cast<double>(i % 2), true));
    tokens += static_cast<double>(trajectories.back().size());
  }
  learner.step(trajectories);  // warm-up (and the optimiser's state)
  const int steps = 3;
  start = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) {
    for (auto& trajectory : trajectories)
      for (size_t t = 0; t < trajectory.size(); ++t)
        if (trajectory.action_mask[t]) trajectory.policy_versions[t] = learner.policy_version();
    learner.step(trajectories);
  }
  const double step_seconds = seconds_since(start) / steps;
  const double K = static_cast<double>(learner_config.critic_updates);
  const double flops = (3.0 + 3.0 * K + 1.0) *
                       sao::bench::forward_flops_per_token(config, tokens / static_cast<double>(batch) / 2.0) * tokens;
  std::printf(
      "SAO learner step, batch %lld (%.0f tokens, K=%lld critic updates): %.2f s/step, %.0f tokens/s, %.2f "
      "GFLOP/s = %.1f%% of the matmul limit\n",
      static_cast<long long>(batch), tokens, static_cast<long long>(learner_config.critic_updates), step_seconds,
      tokens / step_seconds, flops / step_seconds / 1e9, 100.0 * flops / step_seconds / 1e9 / limit);
  std::printf("peak RSS %.2f GB (policy + critic + AdamW states + activations)\n", peak_rss_gb());
  if (!made.empty() && flag(argc, argv, "--keep", "").empty()) fs::remove_all(made);
  return 0;
}
