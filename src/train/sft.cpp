// Supervised warm start; see sft.hpp.
#include "train/sft.hpp"

#include "base/error.hpp"

#include "model/device.hpp"

#include "tokenizer/load_tokenizer.hpp"

#include <cmath>
#include <cstdio>
#include <memory>
#include <random>

namespace sao::train {

torch::Tensor sft_loss(const torch::Tensor& logits, const SftBatch& batch) {
  const int64_t steps = batch.input_ids.size(1) - 1;
  auto log_probs = torch::log_softmax(logits.narrow(1, 0, steps), -1);  // [B, T-1, V]
  auto targets = batch.input_ids.narrow(1, 1, steps).unsqueeze(-1);     // [B, T-1, 1]
  auto token_nll = -log_probs.gather(-1, targets).squeeze(-1);          // [B, T-1]
  auto mask = batch.target_mask.to(token_nll.dtype());
  return (token_nll * mask).sum() / mask.sum().clamp_min(1.0);
}

double sft_learning_rate(const config::SftSection& options, int64_t step) {
  if (step < options.warmup_steps) {
    return options.learning_rate * static_cast<double>(step + 1) / static_cast<double>(options.warmup_steps);
  }
  const double span = std::max<int64_t>(1, options.steps - options.warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(step - options.warmup_steps) / span);
  return options.learning_rate * (0.1 + 0.9 * 0.5 * (1.0 + std::cos(M_PI * progress)));
}

namespace {

// One line when a curriculum phase begins, so a log shows which demonstrations
// each stretch of the loss curve came from.
void announce_phase(const config::SftSection& options, size_t phase, int64_t first_step) {
  const auto phases = options.curriculum.size();
  const bool curriculum_phase = phase < phases;
  const int64_t last_step = config::sft_phase_end(options, phase);
  const std::string task = curriculum_phase ? "task with " + options.curriculum[phase].task.dump() : "the run's task";
  std::fprintf(stderr, "sft: phase %zu of %zu, steps %lld-%lld: %s\n", phase + 1, phases + 1,
               static_cast<long long>(first_step + 1), static_cast<long long>(last_step), task.c_str());
}

}  // namespace

void check_phase_count(const config::SftSection& options, size_t given, const char* what) {
  if (given != options.curriculum.size() + 1) {
    throw Error(std::string("sft: ") + std::to_string(given) + " " + what + " for a curriculum of " +
                std::to_string(options.curriculum.size()) +
                " phases; expected one per phase and one for the run's task");
  }
}

SftResult run_sft_loop(model::CausalLM& policy, const config::SftSection& options, const std::string& label,
                       const SftBatchMaker& next_batch, report::JsonlWriter* metrics) {
  // Moved before the optimiser is made: AdamW keeps the parameter tensors
  // it was given, and .to(device) replaces them.
  const auto device = model::parse_device(options.device, "sft.device");
  model::require_device(device, "sft.device");
  policy->to(device);
  torch::optim::AdamW optimizer(policy->parameters(),
                                torch::optim::AdamWOptions(options.learning_rate).weight_decay(options.weight_decay));
  policy->train();
  report::ProgressLine progress(label, options.steps);
  SftResult result;
  int64_t tokens_since_log = 0;
  int64_t total_tokens = 0;
  auto log_start = std::chrono::steady_clock::now();
  const bool has_curriculum = !options.curriculum.empty();
  size_t phase = 0;
  for (int64_t step = 0; step < options.steps; ++step) {
    if (has_curriculum) {
      const auto step_phase = config::sft_phase_of_step(options, step);
      if (step == 0 || step_phase != phase) announce_phase(options, step_phase, step);
      phase = step_phase;
    }
    auto batch = next_batch(step);
    if (!device.is_cpu()) {
      batch.input_ids = batch.input_ids.to(device);
      batch.target_mask = batch.target_mask.to(device);
    }
    const double learning_rate = sft_learning_rate(options, step);
    for (auto& group : optimizer.param_groups()) {
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(learning_rate);
    }
    optimizer.zero_grad();
    auto loss = sft_loss(policy->forward(batch.input_ids), batch);
    loss.backward();
    const double grad_norm = torch::nn::utils::clip_grad_norm_(policy->parameters(), options.grad_clip);
    optimizer.step();
    result.final_loss = loss.item<double>();
    tokens_since_log += batch.tokens;
    total_tokens += batch.tokens;
    if (options.log_every > 0 && ((step + 1) % options.log_every == 0 || step + 1 == options.steps)) {
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - log_start).count();
      const double rate = static_cast<double>(tokens_since_log) / std::max(seconds, 1e-9);
      progress.print(step + 1, {{"loss", result.final_loss}, {"lr", learning_rate}, {"grad_norm", grad_norm}}, rate,
                     "tok");
      if (metrics != nullptr) {
        nlohmann::json line = {{"sft_step", step + 1},
                               {"task", label},
                               {"loss", result.final_loss},
                               {"learning_rate", learning_rate},
                               {"grad_norm", grad_norm},
                               {"tokens_per_s", rate},
                               {"wall_time_s", progress.elapsed_seconds()}};
        // 1-based, as announced; curriculum.size() + 1 is the run's own task.
        if (has_curriculum) line["curriculum_phase"] = phase + 1;
        metrics->write(line);
      }
      tokens_since_log = 0;
      log_start = std::chrono::steady_clock::now();
    }
  }
  result.steps = options.steps;
  result.seconds = progress.elapsed_seconds();
  result.tokens_per_s = static_cast<double>(total_tokens) / std::max(result.seconds, 1e-9);
  return result;
}

}  // namespace sao::train
