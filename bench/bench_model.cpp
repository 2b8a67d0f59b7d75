// Model throughput on this machine, for the default model size: training
// tokens/s (forward + backward + AdamW), batched KV-cache decode tokens/s,
// and both as a fraction of the fp32 matmul rate measured in the same run.
// Small models are overhead-bound, so the fraction says how much of the
// machine the model maths actually uses.
#include "base/allocator.hpp"
#include "config/run_config.hpp"
#include "model/generation.hpp"
#include "model/transformer.hpp"
#include "model_flops.hpp"
#include "report/system_info.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace {

using sao::bench::forward_flops_per_token;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void run_benchmarks(int64_t threads, const sao::model::ModelConfig& model_config);

}  // namespace

// Usage: bench_model [THREADS...]   (default: 1 and 2, each against its own limit)
int main(int argc, char** argv) {
  sao::base::keep_freed_memory_for_reuse();  // as sao itself runs
  std::vector<int64_t> thread_counts;
  for (int i = 1; i < argc; ++i) thread_counts.push_back(std::atoll(argv[i]));
  if (thread_counts.empty()) thread_counts = {1, 2};
  const auto config = sao::config::load_run_config("", {});
  for (const int64_t threads : thread_counts) run_benchmarks(threads, config.model);
  return 0;
}

namespace {

void run_benchmarks(int64_t threads, const sao::model::ModelConfig& model_config) {
  sao::report::configure_threads(threads);
  const auto blas = sao::report::detect_blas();
  const double limit_gflops = sao::report::measure_matmul_gflops(1024, 10);
  std::printf("machine: %s, %lld threads, fp32 matmul 1024^2 = %.1f GFLOP/s (the limit below)\n", blas.name.c_str(),
              static_cast<long long>(threads), limit_gflops);
  std::printf("model: %lld parameters (hidden %lld, layers %lld, heads %lld/%lld kv)\n",
              static_cast<long long>(model_config.parameter_count()), static_cast<long long>(model_config.hidden_size),
              static_cast<long long>(model_config.num_hidden_layers),
              static_cast<long long>(model_config.num_attention_heads),
              static_cast<long long>(model_config.num_key_value_heads));

  sao::model::CausalLM policy(model_config);
  sao::model::init_weights(*policy, 1);
  torch::optim::AdamW optimizer(policy->parameters(), torch::optim::AdamWOptions(1e-3));

  for (const int64_t batch : {64, 256}) {
    const int64_t length = 16;
    auto input = torch::randint(0, 256, {batch, length}, torch::kInt64);
    auto step = [&] {
      optimizer.zero_grad();
      auto logits = policy->forward(input);
      torch::log_softmax(logits, -1).mean().backward();
      optimizer.step();
    };
    step();  // warm-up
    const int iterations = 10;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) step();
    const double elapsed = seconds_since(start);
    const double tokens = static_cast<double>(batch * length * iterations);
    const double achieved = 3.0 * forward_flops_per_token(model_config, length / 2.0) * tokens / elapsed / 1e9;
    std::printf("train  batch %3lld x %lld tokens: %8.0f tokens/s, %6.2f GFLOP/s = %5.1f%% of the matmul limit\n",
                static_cast<long long>(batch), static_cast<long long>(length), tokens / elapsed, achieved,
                100.0 * achieved / limit_gflops);
  }

  // rollout.weights_dtype bf16: the same weights as a bf16 replica. On a
  // CPU without bf16 matrix instructions it is expected to be slower; the
  // line says how much, on this machine.
  sao::model::CausalLM bf16_replica = sao::model::clone_policy(policy);
  bf16_replica->to(torch::kBFloat16);
  for (const int64_t batch : {8, 64, 256}) {
    sao::model::SamplingConfig sampling;
    sampling.max_new_tokens = 32;  // no stop token: every row decodes the full budget
    std::vector<std::vector<int64_t>> prompts(static_cast<size_t>(batch),
                                              std::vector<int64_t>{257, 49, 50, 43, 51, 61});
    double fp32_rate = 0;
    for (auto* model : {&policy, &bf16_replica}) {
      sao::model::generate(*model, prompts, sampling, 1);  // warm-up
      const auto start = std::chrono::steady_clock::now();
      const auto outputs = sao::model::generate(*model, prompts, sampling, 2);
      const double elapsed = seconds_since(start);
      const double tokens = static_cast<double>(batch * sampling.max_new_tokens);
      const double context = 6.0 + sampling.max_new_tokens / 2.0;
      const double achieved = forward_flops_per_token(model_config, context) * tokens / elapsed / 1e9;
      if (model == &policy) {
        fp32_rate = tokens / elapsed;
        std::printf(
            "decode batch %3lld, %lld new tokens: %8.0f tokens/s, %6.2f GFLOP/s = %5.1f%% of the matmul limit\n",
            static_cast<long long>(batch), static_cast<long long>(sampling.max_new_tokens), tokens / elapsed, achieved,
            100.0 * achieved / limit_gflops);
      } else {
        std::printf("decode batch %3lld, bf16 replica:   %8.0f tokens/s, %.2fx fp32\n", static_cast<long long>(batch),
                    tokens / elapsed, tokens / elapsed / fp32_rate);
      }
    }
  }
}

}  // namespace
