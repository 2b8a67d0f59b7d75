// sao's half of bench/vs_pytorch: the workloads that bench/vs_pytorch.py
// runs in PyTorch eager, with the same shapes, the same work per iteration
// and one thread. Prints one JSON line per workload (median seconds per
// iteration), so the script can pair the two sides round by round.
//
//   bench_vs_pytorch --print-config   the model and learner settings, as JSON
//   bench_vs_pytorch [WORKLOAD...]    learner, train_b64, train_b256,
//                                     decode_b1, decode_b8, decode_b64, decode_b256
//                                     (default: all)
#include "algo/learner.hpp"
#include "algo/trajectory.hpp"
#include "base/allocator.hpp"
#include "base/error.hpp"
#include "config/run_config.hpp"
#include "model/generation.hpp"
#include "model/transformer.hpp"
#include "model_flops.hpp"
#include "report/system_info.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace {

// Shared with bench/vs_pytorch.py: change both together.
constexpr int64_t kLearnerBatch = 64;
constexpr int64_t kLearnerResponseTokens = 8;
constexpr int64_t kTrainTokens = 16;
constexpr int64_t kDecodeNewTokens = 32;
const std::vector<int64_t> kDecodePrompt = {257, 49, 50, 43, 51, 61};

double median_seconds(int iterations, const std::function<void()>& body) {
  body();  // warm-up: first-touch allocations and BLAS thread start-up
  std::vector<double> times;
  for (int i = 0; i < iterations; ++i) {
    const auto start = std::chrono::steady_clock::now();
    body();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// The fp32 matmul rate of this process's thread: the "fraction of the
// matmul limit" is flops / seconds over it.
double g_limit_gflops = 0;

void print_result(const std::string& workload, double seconds, double units, const char* unit, double flops) {
  nlohmann::json line = {{"side", "sao"},      {"workload", workload},
                         {"seconds", seconds}, {"units", units},
                         {"unit", unit},       {"matmul_limit_fraction", flops / seconds / 1e9 / g_limit_gflops}};
  std::printf("%s\n", line.dump().c_str());
  std::fflush(stdout);
}

// "a+b=" prompts (7 tokens) with 8 sampled response tokens and a 0/1
// outcome: every row has 15 tokens, as in vs_pytorch.py.
std::vector<sao::algo::Trajectory> learner_batch(sao::model::CausalLM& policy) {
  std::mt19937_64 random(7);
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t i = 0; i < kLearnerBatch; ++i) {
    std::vector<int64_t> prompt = {257};
    const std::string text = std::to_string(random() % 90 + 10) + "+" + std::to_string(random() % 90 + 10) + "=";
    for (char c : text) prompt.push_back(static_cast<unsigned char>(c));
    prompts.push_back(prompt);
  }
  sao::model::SamplingConfig sampling;
  sampling.max_new_tokens = kLearnerResponseTokens;
  const auto sequences = sao::model::generate(policy, prompts, sampling, 7);
  std::vector<sao::algo::Trajectory> trajectories;
  for (size_t i = 0; i < sequences.size(); ++i) {
    trajectories.push_back(sao::algo::trajectory_from_generation(prompts[i], sequences[i], static_cast<double>(i % 2),
                                                                 /*terminated=*/true));
  }
  return trajectories;
}

void run_workload(const std::string& workload, const sao::config::RunConfig& config) {
  // The limit is measured right before each workload: on a shared machine
  // the rate a core gives drifts over a run.
  g_limit_gflops = sao::report::measure_matmul_gflops(1024, 10);
  sao::model::CausalLM policy(config.model);
  sao::model::init_weights(*policy, 1);
  if (workload == "learner") {
    sao::model::ValueModel critic(config.model);
    sao::model::init_value_from_policy(critic, policy);
    auto learner_config = config.learner;
    learner_config.critic_warmup_steps = 0;  // full steps (critic + actor) only
    sao::algo::Learner learner(learner_config, policy, critic);
    auto trajectories = learner_batch(policy);
    double tokens = 0;
    for (const auto& trajectory : trajectories) tokens += static_cast<double>(trajectory.size());
    const double seconds = median_seconds(5, [&] {
      // Versions follow the learner so staleness never filters the batch.
      for (auto& trajectory : trajectories) {
        for (size_t t = 0; t < trajectory.size(); ++t) {
          if (trajectory.action_mask[t]) trajectory.policy_versions[t] = learner.policy_version();
        }
      }
      learner.step(trajectories);
    });
    const double flops =
        sao::bench::sao_step_flops_per_token(config.model, tokens / kLearnerBatch / 2.0, learner_config.critic_updates,
                                             learner_config.freeze_critic_attention) *
        tokens;
    print_result(workload, seconds, tokens, "trained tokens", flops);
    return;
  }
  if (workload.rfind("train_b", 0) == 0) {
    const int64_t batch = std::stoll(workload.substr(7));
    torch::optim::AdamW optimizer(policy->parameters(), torch::optim::AdamWOptions(1e-3));
    auto input = torch::randint(0, config.model.vocab_size, {batch, kTrainTokens}, torch::kInt64);
    const double seconds = median_seconds(10, [&] {
      optimizer.zero_grad();
      torch::log_softmax(policy->forward(input), -1).mean().backward();
      optimizer.step();
    });
    const double tokens = static_cast<double>(batch * kTrainTokens);
    const double flops = 3.0 * sao::bench::forward_flops_per_token(config.model, kTrainTokens / 2.0) * tokens;
    print_result(workload, seconds, tokens, "tokens", flops);
    return;
  }
  if (workload.rfind("decode_b", 0) == 0) {
    const int64_t batch = std::stoll(workload.substr(8));
    sao::model::SamplingConfig sampling;
    sampling.max_new_tokens = kDecodeNewTokens;  // no stop token: every row decodes the full budget
    const std::vector<std::vector<int64_t>> prompts(static_cast<size_t>(batch), kDecodePrompt);
    uint64_t seed = 1;
    const double seconds =
        median_seconds(batch >= 256 ? 3 : 5, [&] { sao::model::generate(policy, prompts, sampling, ++seed); });
    const double tokens = static_cast<double>(batch * kDecodeNewTokens);
    const double context = static_cast<double>(kDecodePrompt.size()) + kDecodeNewTokens / 2.0;
    const double flops = sao::bench::forward_flops_per_token(config.model, context) * tokens;
    print_result(workload, seconds, tokens, "new tokens", flops);
    return;
  }
  throw sao::Error("unknown workload '" + workload +
                   "' (known: learner, train_b64, train_b256, decode_b1, decode_b8, decode_b64, decode_b256)");
}

}  // namespace

int main(int argc, char** argv) {
  sao::base::keep_freed_memory_for_reuse();  // as sao itself runs
  try {
    const auto config = sao::config::load_run_config("", {});
    std::vector<std::string> workloads(argv + 1, argv + argc);
    if (workloads.size() == 1 && workloads[0] == "--print-config") {
      const auto& l = config.learner;
      nlohmann::json out = {{"model", sao::model::model_config_settings_to_json(config.model)},
                            {"learner",
                             {{"critic_updates", l.critic_updates},
                              {"actor_lr", l.actor_lr},
                              {"critic_lr", l.critic_lr},
                              {"weight_decay", l.weight_decay},
                              {"adam_beta1", l.adam_beta1},
                              {"adam_beta2", l.adam_beta2},
                              {"adam_eps", l.adam_eps},
                              {"max_grad_norm", l.max_grad_norm},
                              {"gamma", l.gamma},
                              {"lambda_critic", l.lambda_critic},
                              {"adaptive_lambda", l.adaptive_lambda},
                              {"lambda_alpha", l.lambda_alpha},
                              {"lambda_policy", l.lambda_policy},
                              {"value_clip", l.value_clip},
                              {"normalize_advantages", l.normalize_advantages},
                              {"dis_eps_low", l.dis.eps_low},
                              {"dis_eps_high", l.dis.eps_high}}},
                            {"shapes",
                             {{"learner_batch", kLearnerBatch},
                              {"learner_response_tokens", kLearnerResponseTokens},
                              {"train_tokens", kTrainTokens},
                              {"decode_new_tokens", kDecodeNewTokens},
                              {"decode_prompt", kDecodePrompt}}}};
      std::printf("%s\n", out.dump().c_str());
      return 0;
    }
    if (workloads.empty()) {
      workloads = {"learner", "train_b64", "train_b256", "decode_b1", "decode_b8", "decode_b64", "decode_b256"};
    }
    sao::report::configure_threads(1);
    for (const auto& workload : workloads) run_workload(workload, config);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bench_vs_pytorch: %s\n", error.what());
    return 1;
  }
  return 0;
}
