// The GPU path in numbers, all measured in this run on this GPU: decode and
// SAO learner tokens/s for the default model and a ~0.5B (Qwen2.5-0.5B
// shape) model; decode at batch 1/64/256 in fp32, with bf16 autocast and as
// a bf16 replica (rollout.weights_dtype), each as a share of the memory
// bandwidth and of the matrix rate measured right before it; the learner in
// fp32 and bf16 autocast; and the time one weight version takes per
// transport: host bytes (what CAF carries), same-process device-to-device,
// CUDA IPC into another process, an NCCL bucketed broadcast (one rank).
//
//   bench_gpu [--quick]     (--quick: the default model only)
#include "algo/learner.hpp"
#include "algo/trajectory.hpp"
#include "config/run_config.hpp"
#include "gpu/cuda_ipc.hpp"
#include "gpu/nccl_broadcast.hpp"
#include "model/device.hpp"
#include "model/generation.hpp"
#include "model/safetensors.hpp"
#include "model/tensor_blob.hpp"
#include "model/transformer.hpp"
#include "model_flops.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

namespace {

const torch::Device kGpu(torch::kCUDA, 0);

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Seconds per call of `work`, after one warm-up, timed to the device's end.
template <typename Work>
double time_gpu(int repeats, Work work) {
  work();
  sao::model::synchronize(kGpu);
  const double start = now_seconds();
  for (int i = 0; i < repeats; ++i) work();
  sao::model::synchronize(kGpu);
  return (now_seconds() - start) / repeats;
}

// The matrix rate this GPU reaches right now, in FLOP/s: the ceiling each
// workload's share is printed against.
double matmul_rate(torch::ScalarType dtype) {
  const int64_t n = 8192;
  auto a = torch::randn({n, n}, torch::dtype(dtype).device(kGpu));
  auto b = torch::randn({n, n}, torch::dtype(dtype).device(kGpu));
  const double seconds = time_gpu(5, [&] { torch::mm(a, b); });
  return 2.0 * n * n * n / seconds;
}

// The default model (config/default.json, embedded in the binary).
sao::model::ModelConfig default_shape() {
  return sao::config::parse_run_config(sao::config::default_config_document(), "embedded").model;
}

sao::model::ModelConfig half_billion_shape() {
  sao::model::ModelConfig config;  // Qwen2.5-0.5B's shape
  config.model_type = "qwen2";
  config.vocab_size = 151936;
  config.hidden_size = 896;
  config.intermediate_size = 4864;
  config.num_hidden_layers = 24;
  config.num_attention_heads = 14;
  config.num_key_value_heads = 2;
  config.max_position_embeddings = 1024;
  config.attention_bias = true;
  config.tie_word_embeddings = true;
  return config;
}

std::vector<std::vector<int64_t>> prompts(int64_t batch, int64_t length, int64_t vocab, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::vector<std::vector<int64_t>> list(static_cast<size_t>(batch));
  for (auto& prompt : list) {
    for (int64_t i = 0; i < length; ++i) prompt.push_back(static_cast<int64_t>(random() % (vocab - 1)) + 1);
  }
  return list;
}

struct Shape {
  const char* name;
  sao::model::ModelConfig config;
  int64_t prompt_tokens;
  int64_t new_tokens;
};

// The bytes one decode step must read at `batch` rows of `context` tokens:
// every weight once, and each row's keys and values.
double decode_step_bytes(const sao::model::ModelConfig& config, int64_t batch, double context, double element) {
  const double kv_per_token =
      2.0 * static_cast<double>(config.num_hidden_layers * config.num_key_value_heads * config.head_dim()) * element;
  return static_cast<double>(config.parameter_count()) * element + static_cast<double>(batch) * context * kv_per_token;
}

void bench_shape(const Shape& shape, double bf16_rate, double fp32_rate, double bandwidth) {
  const auto& config = shape.config;
  std::printf("\n== %s: %.1fM parameters, prompt %lld + %lld new tokens ==\n", shape.name,
              static_cast<double>(config.parameter_count()) / 1e6, static_cast<long long>(shape.prompt_tokens),
              static_cast<long long>(shape.new_tokens));
  sao::model::CausalLM policy(config);
  sao::model::init_weights(*policy, 1);
  policy->to(kGpu);
  policy->eval();
  // rollout.weights_dtype bf16: the replica a rollout runs, converted once.
  sao::model::CausalLM bf16_replica = sao::model::clone_policy(policy);
  bf16_replica->to(kGpu, torch::kBFloat16);
  bf16_replica->eval();
  sao::model::SamplingConfig sampling;
  sampling.max_new_tokens = shape.new_tokens;
  std::vector<sao::model::GeneratedSequence> sequences;
  std::vector<std::vector<int64_t>> batch_prompts;
  enum class Mode { kFp32, kAutocast, kReplica };
  for (const int64_t batch : {int64_t{1}, int64_t{64}, int64_t{256}}) {
    batch_prompts = prompts(batch, shape.prompt_tokens, config.vocab_size, 3);
    double fp32_tokens_per_s = 0;
    for (const Mode mode : {Mode::kFp32, Mode::kAutocast, Mode::kReplica}) {
      int64_t generated = 0;
      auto& model = mode == Mode::kReplica ? bf16_replica : policy;
      const double seconds = time_gpu(2, [&] {
        const sao::model::AutocastGuard autocast(kGpu, mode == Mode::kAutocast);
        sequences = sao::model::generate(model, batch_prompts, sampling, 5);
        generated = 0;
        for (const auto& s : sequences) generated += static_cast<int64_t>(s.tokens.size());
      });
      const double context = static_cast<double>(shape.prompt_tokens) + static_cast<double>(shape.new_tokens) / 2;
      const double rate = static_cast<double>(generated) / seconds;
      if (mode == Mode::kFp32) fp32_tokens_per_s = rate;
      const bool bf16 = mode != Mode::kFp32;
      // Autocast reads the fp32 weights and writes bf16 copies each step;
      // counted at the replica's bytes, its share is an upper bound.
      const double step_bytes = decode_step_bytes(config, batch, context, bf16 ? 2.0 : 4.0);
      const double steps_per_s = rate / static_cast<double>(batch);
      const double flops = rate * sao::bench::forward_flops_per_token(config, context);
      const char* name = mode == Mode::kFp32 ? "fp32" : mode == Mode::kAutocast ? "bf16 autocast" : "bf16 replica";
      std::printf(
          "decode batch %3lld %-13s %10.0f tokens/s  %6.2f%% of the memory-bandwidth limit  %6.2f%% of the "
          "%s matmul rate  %5.2fx fp32\n",
          static_cast<long long>(batch), name, rate, 100.0 * steps_per_s * step_bytes / bandwidth,
          100.0 * flops / (bf16 ? bf16_rate : fp32_rate), bf16 ? "bf16" : "fp32", rate / fp32_tokens_per_s);
    }
  }
  batch_prompts.resize(std::min<size_t>(batch_prompts.size(), 64));
  sequences.resize(batch_prompts.size());
  std::vector<sao::algo::Trajectory> trajectories;
  for (size_t i = 0; i < sequences.size(); ++i) {
    trajectories.push_back(
        sao::algo::trajectory_from_generation(batch_prompts[i], sequences[i], static_cast<double>(i % 2), true));
  }
  int64_t tokens = 0;
  for (const auto& t : trajectories) tokens += static_cast<int64_t>(t.size());
  for (const bool bf16 : {false, true}) {
    sao::model::CausalLM learner_policy = sao::model::clone_policy(policy);
    learner_policy->to(kGpu);
    sao::model::ValueModel critic(config);
    critic->to(kGpu);
    sao::model::init_value_from_policy(critic, learner_policy);
    sao::algo::LearnerConfig learner_config;
    learner_config.critic_warmup_steps = 0;
    learner_config.device = "cuda:0";
    learner_config.bf16_autocast = bf16;
    sao::algo::Learner learner(learner_config, learner_policy, critic);
    // Every step trains on the same trajectories: their versions stay 0, so
    // staleness grows, which the learner only measures (replay filters).
    const double seconds = time_gpu(2, [&] { learner.step(trajectories); });
    const double rate = static_cast<double>(tokens) / seconds;
    const double context = static_cast<double>(tokens) / static_cast<double>(trajectories.size()) / 2;
    const double flops = rate * sao::bench::sao_step_flops_per_token(config, context, learner_config.critic_updates,
                                                                     learner_config.freeze_critic_attention);
    std::printf("learner %-5s %10.0f tokens/s   %6.2f%% of the %s matmul rate   (%.1f ms per SAO step)\n",
                bf16 ? "bf16" : "fp32", rate, 100.0 * flops / (bf16 ? bf16_rate : fp32_rate), bf16 ? "bf16" : "fp32",
                seconds * 1e3);
  }

  // Weight sync: one version from the learner's policy into a replica.
  sao::model::CausalLM replica(config);
  replica->to(kGpu);
  const double megabytes = static_cast<double>(sao::model::pack_module(*policy).bytes.size()) / 1e6;
  std::printf("weight sync of %.1f MB:\n", megabytes);
  const double host = time_gpu(3, [&] {
    const auto packed = sao::model::pack_module(*policy);
    sao::model::load_packed_into_module(*replica, packed, "bench");
  });
  std::printf("  host bytes (CAF's form: GPU -> host -> GPU)   %9.3f ms  %7.1f GB/s\n", host * 1e3,
              megabytes / 1e3 / host);
  const double device = time_gpu(3, [&] {
    const auto packed = sao::model::pack_module_on_device(*policy, kGpu);
    sao::model::load_device_packed_into_module(*replica, packed, "bench");
  });
  std::printf("  same process, device to device               %9.3f ms  %7.1f GB/s\n", device * 1e3,
              megabytes / 1e3 / device);
  const double export_seconds = time_gpu(3, [&] {
    const auto packed = sao::gpu::pack_module_for_ipc(*policy, kGpu);
    sao::gpu::export_ipc_handle(packed);
  });
  const auto packed = sao::gpu::pack_module_for_ipc(*policy, kGpu);
  const auto handle = sao::gpu::export_ipc_handle(packed);
  const std::string command = std::string(SAO_GPU_IPC_CHILD) + " " + sao::gpu::to_hex(handle) + " -";
  double open_ms = -1, copy_ms = -1;
  if (FILE* child = popen(command.c_str(), "r")) {
    char line[256] = {0};
    if (std::fgets(line, sizeof line, child) != nullptr)
      std::sscanf(line, "ipc_open_ms %lf ipc_copy_ms %lf", &open_ms, &copy_ms);
    pclose(child);
  }
  std::printf("  CUDA IPC: pack + export %.3f ms; other process: open %.3f ms, copy %.3f ms (%.1f GB/s)\n",
              export_seconds * 1e3, open_ms, copy_ms, copy_ms > 0 ? megabytes / copy_ms : 0.0);
  const auto device_packed = sao::model::pack_module_on_device(*policy, kGpu);
  sao::gpu::NcclGroup group(sao::gpu::new_nccl_unique_id(), 0, 1, kGpu);
  const uint64_t total = static_cast<uint64_t>(device_packed.buffer.numel());
  const uint64_t bucket = uint64_t{64} << 20;
  const double nccl = time_gpu(
      3, [&] { group.broadcast(0, &device_packed, replica.get(), device_packed.index, total, bucket, "bench"); });
  std::printf("  NCCL broadcast, 1 rank, 64 MiB buckets        %9.3f ms  %7.1f GB/s\n", nccl * 1e3,
              megabytes / 1e3 / nccl);
}

}  // namespace

int main(int argc, char** argv) {
  if (sao::model::cuda_device_count() == 0) {
    std::printf("bench_gpu: no CUDA device (this LibTorch has no CUDA, or no GPU is present)\n");
    return 2;
  }
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  const double bf16_rate = matmul_rate(torch::kBFloat16);
  const double fp32_rate = matmul_rate(torch::kFloat32);
  std::printf("matmul rate measured now (8192^3): bf16 %.0f TFLOP/s, fp32 %.0f TFLOP/s\n", bf16_rate / 1e12,
              fp32_rate / 1e12);
  // The memory-bandwidth limit measured now: a 1 GiB device copy reads and
  // writes every byte once.
  const auto source = torch::empty({int64_t{1} << 30}, torch::dtype(torch::kUInt8).device(kGpu));
  auto target = torch::empty_like(source);
  const double bandwidth = 2.0 * static_cast<double>(source.numel()) / time_gpu(5, [&] { target.copy_(source); });
  std::printf("memory bandwidth measured now (1 GiB device copy): %.0f GB/s\n", bandwidth / 1e9);
  bench_shape({"default model", default_shape(), 16, 96}, bf16_rate, fp32_rate, bandwidth);
  if (!quick) {
    bench_shape({"0.5B shape (Qwen2.5-0.5B)", half_billion_shape(), 64, 128}, bf16_rate, fp32_rate, bandwidth);
  }
  return 0;
}
