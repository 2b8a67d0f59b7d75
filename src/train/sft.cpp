// Supervised warm start; see sft.hpp.
#include "train/sft.hpp"

#include "base/error.hpp"

#include "model/device.hpp"

#include "tokenizer/load_tokenizer.hpp"
#include "train/evaluation.hpp"

#include <cmath>
#include <cstdio>
#include <memory>
#include <random>

namespace sao::train {

SftBatch make_sft_batch(const tokenizer::Tokenizer& tokenizer, const std::vector<env::ArithmeticProblem>& problems,
                        const std::string& answer_format) {
  std::vector<std::string> answers;
  answers.reserve(problems.size());
  for (const auto& problem : problems) answers.push_back(env::ArithmeticTask::target_text(problem, answer_format));
  return make_sft_batch(tokenizer, problems, answers);
}

SftBatch make_sft_batch(const tokenizer::Tokenizer& tokenizer, const std::vector<env::ArithmeticProblem>& problems,
                        const std::vector<std::string>& answers) {
  if (answers.size() != problems.size()) {
    throw Error("make_sft_batch: " + std::to_string(answers.size()) + " answers for " +
                std::to_string(problems.size()) + " problems");
  }
  std::vector<std::vector<int64_t>> sequences;
  std::vector<size_t> prompt_lengths;
  size_t width = 0;
  for (size_t i = 0; i < problems.size(); ++i) {
    auto ids = encode_prompt(tokenizer, problems[i]);
    prompt_lengths.push_back(ids.size());
    const auto answer = tokenizer.encode(answers[i]);
    ids.insert(ids.end(), answer.begin(), answer.end());
    const auto end = tokenizer.action_end();
    ids.insert(ids.end(), end.begin(), end.end());
    width = std::max(width, ids.size());
    sequences.push_back(std::move(ids));
  }
  const auto batch = static_cast<int64_t>(sequences.size());
  SftBatch result;
  result.input_ids = torch::full({batch, static_cast<int64_t>(width)}, tokenizer::padding_id(tokenizer), torch::kInt64);
  result.target_mask = torch::zeros({batch, static_cast<int64_t>(width) - 1}, torch::kBool);
  auto ids = result.input_ids.accessor<int64_t, 2>();
  auto mask = result.target_mask.accessor<bool, 2>();
  for (int64_t row = 0; row < batch; ++row) {
    const auto& sequence = sequences[static_cast<size_t>(row)];
    for (size_t t = 0; t < sequence.size(); ++t) ids[row][static_cast<int64_t>(t)] = sequence[t];
    // Target t+1 is predicted at position t; answer targets start at the prompt's end.
    for (size_t t = prompt_lengths[static_cast<size_t>(row)]; t < sequence.size(); ++t) {
      mask[row][static_cast<int64_t>(t) - 1] = true;
    }
    result.tokens += static_cast<int64_t>(sequence.size());
  }
  return result;
}

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
  result.tokens_per_second = static_cast<double>(total_tokens) / std::max(result.seconds, 1e-9);
  return result;
}

SftBatchMaker arithmetic_batch_maker(const std::vector<env::ArithmeticTask>& phase_tasks,
                                     const tokenizer::Tokenizer& tokenizer, const config::SftSection& options,
                                     uint64_t seed) {
  check_phase_count(options, phase_tasks.size(), "arithmetic tasks");
  // One generator across phases: a curriculum changes what is drawn, not the stream.
  auto rng = std::make_shared<std::mt19937_64>(seed);
  return [rng, &phase_tasks, &tokenizer, &options](int64_t step) {
    const auto& task = phase_tasks[config::sft_phase_of_step(options, step)];
    std::vector<env::ArithmeticProblem> problems;
    std::vector<std::string> answers;
    for (int64_t i = 0; i < options.batch_size; ++i) {
      problems.push_back(task.sample_train(*rng));
      answers.push_back(task.demonstration_text(problems.back(), *rng));
    }
    return make_sft_batch(tokenizer, problems, answers);
  };
}

SftResult run_sft(model::CausalLM& policy, const std::vector<env::ArithmeticTask>& phase_tasks,
                  const tokenizer::Tokenizer& tokenizer, const config::SftSection& options, uint64_t seed,
                  report::JsonlWriter* metrics) {
  return run_sft_loop(policy, options, "sft", arithmetic_batch_maker(phase_tasks, tokenizer, options, seed), metrics);
}

SftResult run_sft(model::CausalLM& policy, const env::ArithmeticTask& task, const tokenizer::Tokenizer& tokenizer,
                  const config::SftSection& options, uint64_t seed, report::JsonlWriter* metrics) {
  const std::vector<env::ArithmeticTask> phase_tasks{task};
  return run_sft(policy, phase_tasks, tokenizer, options, seed, metrics);
}

}  // namespace sao::train
