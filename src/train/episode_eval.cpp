// Held-out multi-turn evaluation; see episode_eval.hpp.
#include "train/episode_eval.hpp"

#include "model/generation.hpp"
#include "base/error.hpp"

#include <algorithm>
#include <chrono>

namespace sao::train {

namespace {
struct Row {
  int64_t index = 0;
  double reward = 0.0;
  int64_t turns = 0;
  bool active = true;
  bool success = false;
  std::string transcript;
};

std::vector<int64_t> observation_tokens(const tokenizer::Tokenizer& tokenizer, const std::string& text) {
  auto ids = tokenizer.encode(text);
  if (ids.empty()) {
    const auto obs = tokenizer.special_id("<|obs|>");
    if (!obs) throw Error("evaluate_episodes: empty observation needs an <|obs|> token, which this tokenizer lacks");
    ids.push_back(*obs);
  }
  return ids;
}
}  // namespace

bool step_succeeded(const env::EnvStep& final_step) {
  const auto& info = final_step.info;
  if (info.is_object() && info.contains("success")) {
    const auto& value = info["success"];
    if (value.is_boolean()) return value.get<bool>();
    if (value.is_number()) return value.get<double>() != 0.0;
  }
  if (info.is_object() && info.contains("accuracy") && info["accuracy"].is_number()) {
    return info["accuracy"].get<double>() >= 1.0 - 1e-9;
  }
  return final_step.terminated && final_step.reward > 0.0;
}

EpisodeEvalResult evaluate_episodes(model::CausalLM& policy, const tokenizer::Tokenizer& tokenizer,
                                    const EnvironmentMaker& make_environment, const EpisodeEvalOptions& options,
                                    uint64_t seed) {
  if (options.batch_size < 1) throw Error("evaluate_episodes: batch_size must be >= 1");
  const auto start_time = std::chrono::steady_clock::now();
  auto probe = make_environment();
  const int64_t available = probe->heldout_size();
  if (available <= 0) throw Error("evaluate_episodes: environment '" + probe->name() + "' has no held-out split");
  const int64_t total = options.episodes > 0 ? std::min(options.episodes, available) : available;
  int64_t max_turns = options.max_turns > 0 ? options.max_turns : probe->limits().max_turns;
  if (max_turns <= 0) max_turns = 64;

  model::SamplingConfig sampling;
  sampling.temperature = options.temperature;
  sampling.max_new_tokens = options.max_new_tokens;
  sampling.stop_tokens = {tokenizer.eos_id()};

  const bool was_training = policy->is_training();
  policy->eval();
  EpisodeEvalResult result;
  double reward_sum = 0.0;
  int64_t turn_sum = 0;
  std::vector<std::unique_ptr<env::Environment>> environments;
  for (int64_t begin = 0; begin < total; begin += options.batch_size) {
    const int64_t count = std::min(options.batch_size, total - begin);
    while (static_cast<int64_t>(environments.size()) < count) {
      environments.push_back(environments.empty() && probe ? std::move(probe) : make_environment());
    }
    std::vector<Row> rows(static_cast<size_t>(count));
    std::vector<std::vector<int64_t>> prompts;
    for (int64_t r = 0; r < count; ++r) {
      auto& row = rows[static_cast<size_t>(r)];
      auto& environment = *environments[static_cast<size_t>(r)];
      row.index = begin + r;
      if (options.learner_step >= 0) environment.on_training_step(options.learner_step);
      std::vector<int64_t> prompt = {tokenizer.bos_id()};
      try {
        const auto first = environment.reset_heldout(row.index);
        const auto ids = observation_tokens(tokenizer, first.observation);
        prompt.insert(prompt.end(), ids.begin(), ids.end());
        row.transcript = first.observation;
        if (first.done()) row.active = false;  // nothing to play (counts as a failure)
      } catch (const std::exception& error) {
        ++result.errors;
        row.active = false;
        row.transcript = std::string("reset error: ") + error.what();
      }
      prompts.push_back(std::move(prompt));
    }
    model::DecodeSession session(std::move(prompts), sampling, seed + static_cast<uint64_t>(begin));
    // Rows that ended before decoding still occupy a session row; they just generate one ignored turn.
    auto any_active = [&] { return std::any_of(rows.begin(), rows.end(), [](const Row& row) { return row.active; }); };
    while (any_active()) {
      session.step(policy, 0);
      for (size_t r = 0; r < rows.size(); ++r) {
        auto& row = rows[r];
        const auto& sequence = session.sequence(r);
        if (!row.active || sequence.finish == model::FinishReason::kRunning) continue;
        std::vector<int64_t> action(sequence.tokens.begin() + static_cast<std::ptrdiff_t>(sequence.turn_start),
                                    sequence.tokens.end());
        action.erase(std::find(action.begin(), action.end(), tokenizer.eos_id()), action.end());
        const std::string text = tokenizer.decode(action, /*skip_special=*/true);
        ++row.turns;
        row.transcript += " | " + text;
        env::EnvStep step;
        try {
          step = environments[r]->step(text);
        } catch (const std::exception& error) {
          ++result.errors;
          row.active = false;
          row.transcript += std::string(" => env error: ") + error.what();
          continue;
        }
        row.reward += step.reward;
        const bool context_full = sequence.finish == model::FinishReason::kContextFull;
        if (step.done() || row.turns >= max_turns || context_full) {
          row.active = false;
          row.success = step.done() && step_succeeded(step);
          row.transcript += row.success ? " => success" : " => failure";
          continue;
        }
        row.transcript += " -> " + step.observation;
        session.continue_row(r, observation_tokens(tokenizer, step.observation), options.max_new_tokens);
      }
    }
    for (const auto& row : rows) {
      result.successes += row.success ? 1 : 0;
      reward_sum += row.reward;
      turn_sum += row.turns;
      if (static_cast<int64_t>(result.samples.size()) < options.sample_transcripts) {
        result.samples.push_back(row.transcript);
      }
    }
  }
  if (was_training) policy->train();
  result.episodes = total;
  result.success_rate = static_cast<double>(result.successes) / static_cast<double>(total);
  result.mean_reward = reward_sum / static_cast<double>(total);
  result.mean_turns = static_cast<double>(turn_sum) / static_cast<double>(total);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count();
  return result;
}

}  // namespace sao::train
