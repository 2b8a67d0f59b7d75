// The model on a CUDA device against the same model on the CPU: forward
// passes, KV-cache decoding, the GPU sampler, a full SAO learner step, and
// device-to-device weight packs. Runs only where LibTorch sees a GPU; on
// any other machine it prints "skipped: no CUDA device" and exits 77, which
// CTest reports as skipped (tests/CMakeLists.txt).
#include "algo/learner.hpp"
#include "algo/trajectory.hpp"
#include "model/device.hpp"
#include "model/generation.hpp"
#include "model/safetensors.hpp"
#include "model/tensor_blob.hpp"
#include "model/transformer.hpp"

#include "test_gpu_device_main.hpp"

#include <cstdio>

using sao::model::CausalLM;

namespace {

const torch::Device kGpu(torch::kCUDA, 0);

sao::model::ModelConfig test_config() {
  return sao::test::default_model_config();
}

CausalLM policy_on(const torch::Device& device, uint64_t seed, double embed_scale = 1.0) {
  CausalLM policy(test_config());
  sao::model::init_weights(*policy, seed);
  if (embed_scale != 1.0) {
    torch::NoGradGuard no_grad;
    policy->model->embed_tokens->weight.mul_(embed_scale);
  }
  policy->to(device);
  return policy;
}

std::vector<std::vector<int64_t>> prompts() {
  std::vector<std::vector<int64_t>> list;
  for (int64_t row = 0; row < 8; ++row) {
    std::vector<int64_t> prompt;
    for (int64_t i = 0; i < 3 + row % 4; ++i) prompt.push_back(1 + (row * 31 + i * 7) % 250);
    list.push_back(prompt);
  }
  return list;
}

double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kCPU).to(torch::kFloat64) - b.to(torch::kCPU).to(torch::kFloat64)).abs().max().item<double>();
}

}  // namespace

TEST_CASE("a forward pass on the GPU agrees with the CPU") {
  auto cpu = policy_on(torch::kCPU, 5);
  auto gpu = policy_on(kGpu, 5);
  auto ids = torch::randint(0, 264, {4, 48}, torch::kInt64);
  torch::NoGradGuard no_grad;
  const auto on_cpu = cpu->forward(ids);
  const auto on_gpu = gpu->forward(ids.to(kGpu));
  CHECK(on_gpu.device().is_cuda());
  const double diff = max_abs_diff(on_cpu, on_gpu);
  MESSAGE("max |logit difference| " << diff);
  CHECK(diff < 1e-4);
}

TEST_CASE("greedy KV-cache decoding on the GPU gives the CPU's tokens") {
  // Embeddings scaled up so the logits' margins dwarf fp32 rounding: with
  // the init's tiny logits the argmax of two kernels may differ on a tie.
  auto cpu = policy_on(torch::kCPU, 6, 30.0);
  auto gpu = policy_on(kGpu, 6, 30.0);
  sao::model::SamplingConfig greedy;
  greedy.temperature = 0.0;
  greedy.max_new_tokens = 24;
  const auto on_cpu = sao::model::generate(cpu, prompts(), greedy, 1);
  const auto on_gpu = sao::model::generate(gpu, prompts(), greedy, 1);
  for (size_t row = 0; row < on_cpu.size(); ++row) {
    INFO("row " << row);
    CHECK(on_gpu[row].tokens == on_cpu[row].tokens);
  }
}

TEST_CASE("sampled tokens' recorded log-probs on the GPU are the policy's, and the same seed repeats them") {
  auto gpu = policy_on(kGpu, 7);
  auto cpu = policy_on(torch::kCPU, 7);
  sao::model::SamplingConfig sampling;
  sampling.max_new_tokens = 16;
  const auto first = sao::model::generate(gpu, prompts(), sampling, 42);
  const auto second = sao::model::generate(gpu, prompts(), sampling, 42);
  double worst = 0;
  for (size_t row = 0; row < first.size(); ++row) {
    CHECK(first[row].tokens == second[row].tokens);
    // Score the sampled tokens with the CPU model: the GPU's recorded
    // log-probs must be the log-probs of the policy itself.
    auto prompt = prompts()[row];
    std::vector<int64_t> sequence = prompt;
    sequence.insert(sequence.end(), first[row].tokens.begin(), first[row].tokens.end());
    torch::NoGradGuard no_grad;
    auto ids = torch::tensor(sequence, torch::kInt64).view({1, -1});
    auto scored = sao::algo::policy_outputs(cpu, ids).logprobs.view({-1});
    for (size_t i = 0; i < first[row].tokens.size(); ++i) {
      const double want = scored[static_cast<int64_t>(prompt.size() + i)].item<double>();
      worst = std::max(worst, std::abs(want - first[row].logprobs[i]));
    }
  }
  MESSAGE("max |log-prob difference| " << worst);
  CHECK(worst < 1e-4);
}

TEST_CASE("a SAO learner step on the GPU matches the same step on the CPU") {
  auto sampler = policy_on(torch::kCPU, 8);
  sao::model::SamplingConfig sampling;
  sampling.max_new_tokens = 12;
  const auto sequences = sao::model::generate(sampler, prompts(), sampling, 3);
  std::vector<sao::algo::Trajectory> batch;
  for (size_t row = 0; row < sequences.size(); ++row) {
    batch.push_back(sao::algo::trajectory_from_generation(prompts()[row], sequences[row],
                                                          sequences[row].tokens.front() % 2 == 0 ? 1.0 : 0.0, true));
  }
  sao::algo::LearnerConfig config;
  config.critic_warmup_steps = 0;
  const auto run = [&](const torch::Device& device) {
    auto policy = policy_on(device, 8);
    sao::model::ValueModel critic(test_config());
    critic->to(device);
    sao::model::init_value_from_policy(critic, policy);
    auto placed = config;
    placed.device = sao::model::device_name(device);
    sao::algo::Learner learner(placed, policy, critic);
    auto result = learner.step(batch);
    return std::make_pair(result.metrics, sao::model::pack_module(*policy));
  };
  const auto [cpu_metrics, cpu_weights] = run(torch::kCPU);
  const auto [gpu_metrics, gpu_weights] = run(kGpu);
  CHECK(gpu_metrics.at("policy_version") == 1.0);
  for (const char* key : {"policy_loss", "value_loss", "value_loss_final", "ratio_mean", "entropy"}) {
    INFO(key << " cpu " << cpu_metrics.at(key) << " gpu " << gpu_metrics.at(key));
    CHECK(std::abs(cpu_metrics.at(key) - gpu_metrics.at(key)) <= 1e-4 * (1.0 + std::abs(cpu_metrics.at(key))));
  }
  // One AdamW step moves each weight by about lr; the two must agree far below that.
  double worst = 0;
  for (size_t i = 0; i < cpu_weights.index.size(); ++i) {
    worst = std::max(
        worst, max_abs_diff(sao::model::unpack_tensor(cpu_weights, i), sao::model::unpack_tensor(gpu_weights, i)));
  }
  MESSAGE("max |weight difference| after one step " << worst << " (actor_lr " << config.actor_lr << ")");
  CHECK(worst < 0.5 * config.actor_lr);
}

TEST_CASE("bf16 autocast keeps log-probs fp32 and close to the fp32 ones") {
  auto gpu = policy_on(kGpu, 9);
  auto ids = torch::randint(0, 264, {4, 32}, torch::kInt64).to(kGpu);
  torch::NoGradGuard no_grad;
  const auto exact = sao::algo::policy_outputs(gpu, ids).logprobs;
  torch::Tensor mixed;
  {
    sao::model::AutocastGuard autocast(kGpu, true);
    mixed = sao::algo::policy_outputs(gpu, ids).logprobs;
  }
  CHECK((mixed.scalar_type() == torch::kFloat32));
  const double diff = max_abs_diff(exact, mixed);
  MESSAGE("max |log-prob difference| bf16 vs fp32 " << diff);
  CHECK(diff > 0);     // autocast did run the products in bf16
  CHECK(diff < 0.05);  // and they stay close
  // The guard restored the state: the same call is exact again.
  CHECK(max_abs_diff(exact, sao::algo::policy_outputs(gpu, ids).logprobs) == 0);
}

TEST_CASE("weights packed on the GPU load into another GPU replica bit for bit") {
  auto source = policy_on(kGpu, 10);
  auto target = policy_on(kGpu, 11);
  const auto packed = sao::model::pack_module_on_device(*source, kGpu);
  CHECK(packed.buffer.is_cuda());
  sao::model::load_device_packed_into_module(*target, packed, "test");
  const auto want = sao::model::named_tensors_of(*source);
  const auto got = sao::model::named_tensors_of(*target);
  for (size_t i = 0; i < want.size(); ++i) CHECK(torch::equal(want[i].second, got[i].second));
  // And into a CPU replica (a rollout on the CPU of the same process).
  auto host_target = policy_on(torch::kCPU, 12);
  sao::model::load_device_packed_into_module(*host_target, packed, "test");
  CHECK(torch::equal(sao::model::named_tensors_of(*host_target)[0].second, want[0].second.cpu()));
}
