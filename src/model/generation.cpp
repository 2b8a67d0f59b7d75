// Batched KV-cache decoding; see generation.hpp for the contract.
#include "model/generation.hpp"

#include "base/error.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <limits>

namespace sao::model {

void SamplingConfig::validate(const std::string& source) const {
  if (temperature < 0) throw Error(source + ".temperature: must be >= 0 (0 = greedy)");
  if (top_k < 0) throw Error(source + ".top_k: must be >= 0 (0 disables)");
  if (!(top_p > 0 && top_p <= 1)) throw Error(source + ".top_p: must be in (0, 1]");
  if (max_new_tokens < 1) throw Error(source + ".max_new_tokens: must be >= 1");
}

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kRunning:
      return "running";
    case FinishReason::kStopToken:
      return "stop_token";
    case FinishReason::kMaxNewTokens:
      return "max_new_tokens";
    case FinishReason::kContextFull:
      return "context_full";
  }
  return "unknown";
}

torch::Tensor sampling_log_probs(const torch::Tensor& logits, const SamplingConfig& config) {
  auto scaled = logits.to(torch::kFloat32);
  if (config.temperature == 0.0) {
    // Greedy is a point mass: log-prob 0 at the argmax, -inf elsewhere.
    auto result = torch::full_like(scaled, -std::numeric_limits<float>::infinity());
    return result.scatter_(1, scaled.argmax(1, /*keepdim=*/true), 0.0);
  }
  if (config.temperature != 1.0) scaled = scaled / config.temperature;
  const float negative_infinity = -std::numeric_limits<float>::infinity();
  if (config.top_k > 0 && config.top_k < scaled.size(1)) {
    auto kth = std::get<0>(scaled.topk(config.top_k, 1)).narrow(1, config.top_k - 1, 1);  // [R, 1]
    scaled = scaled.masked_fill(scaled < kth, negative_infinity);
  }
  if (config.top_p < 1.0) {
    auto sorted = scaled.sort(1, /*descending=*/true);
    auto sorted_probs = torch::softmax(std::get<0>(sorted), 1);
    // Keep the smallest prefix whose mass reaches top_p (the first token always stays).
    auto mass_before = sorted_probs.cumsum(1) - sorted_probs;
    auto remove_sorted = mass_before >= config.top_p;
    auto remove = torch::zeros_like(remove_sorted).scatter(1, std::get<1>(sorted), remove_sorted);
    scaled = scaled.masked_fill(remove, negative_infinity);
  }
  return torch::log_softmax(scaled, 1);
}

torch::Tensor sample_on_device(const torch::Tensor& log_probs, const torch::Tensor& uniforms) {
  // Inverse CDF in float64: with a 150k-token vocabulary a float32 running
  // sum loses the tail's resolution. A token of probability 0 has a CDF step
  // of 0, so it can only be hit by the clamp at the very end, which the
  // where() below turns into the most likely token instead.
  auto cdf = log_probs.to(torch::kFloat64).exp().cumsum(1);  // [R, V]
  auto targets = uniforms.to(torch::kFloat64) * cdf.narrow(1, cdf.size(1) - 1, 1);
  auto chosen = torch::searchsorted(cdf, targets, /*out_int32=*/false, /*right=*/true).clamp_max(cdf.size(1) - 1);
  auto impossible = torch::isinf(log_probs.gather(1, chosen));
  return torch::where(impossible, log_probs.argmax(1, /*keepdim=*/true), chosen);
}

DecodeSession::DecodeSession(std::vector<std::vector<int64_t>> prompts, SamplingConfig config, uint64_t seed)
    : config_(std::move(config)), generator_(at::detail::createCPUGenerator(seed)), pending_(std::move(prompts)) {
  config_.validate("sampling");
  sequences_.resize(pending_.size());
  budget_.assign(pending_.size(), config_.max_new_tokens);
  for (size_t row = 0; row < pending_.size(); ++row) {
    if (pending_[row].empty()) throw Error("prompt " + std::to_string(row) + " is empty: it needs at least one token");
  }
}

bool DecodeSession::done() const {
  return std::none_of(sequences_.begin(), sequences_.end(),
                      [](const GeneratedSequence& s) { return s.finish == FinishReason::kRunning; });
}

bool DecodeSession::step(CausalLM& policy, int64_t weight_version) {
  if (done()) return false;
  // Inference mode, not just no-grad: tensors made here never enter autograd,
  // so LibTorch skips version counting and view tracking on each of the few
  // hundred small ops of a decode step.
  c10::InferenceMode inference;
  const auto batch = static_cast<int64_t>(pending_.size());
  const auto device = policy->model->embed_tokens->weight.device();
  if (!cache_ready_) {
    cache_ = KVCache::empty(batch, policy->config().num_hidden_layers, device);
    cache_ready_ = true;
  }
  // Right-align the pending tokens so column T-1 is every row's newest token.
  size_t width = 1;
  for (const auto& tokens : pending_) width = std::max(width, tokens.size());
  auto input_ids = torch::zeros({batch, static_cast<int64_t>(width)}, torch::kInt64);
  auto input_valid = torch::zeros({batch, static_cast<int64_t>(width)}, torch::kBool);
  auto ids = input_ids.accessor<int64_t, 2>();
  auto valid = input_valid.accessor<bool, 2>();
  std::vector<size_t> sampled_rows;
  for (size_t row = 0; row < pending_.size(); ++row) {
    const auto offset = width - pending_[row].size();
    for (size_t i = 0; i < pending_[row].size(); ++i) {
      ids[static_cast<int64_t>(row)][static_cast<int64_t>(offset + i)] = pending_[row][i];
      valid[static_cast<int64_t>(row)][static_cast<int64_t>(offset + i)] = true;
    }
    if (sequences_[row].finish == FinishReason::kRunning) sampled_rows.push_back(row);
    pending_[row].clear();
  }
  // The first call holds the prompts; room for the whole first turn is made
  // at once so that decoding never regrows the cache.
  if (cache_.slots() == 0) cache_.reserve(static_cast<int64_t>(width) + config_.max_new_tokens);
  if (!device.is_cpu()) {
    input_ids = input_ids.to(device);
    input_valid = input_valid.to(device);
  }
  auto hidden = policy->model->forward_cached(input_ids, input_valid, cache_);  // [B, T, D]
  // Only the newest column is sampled from: the LM head (the largest matmul
  // of a small model) runs on one position per row, not on the whole prompt.
  auto last_logits = policy->logits_from_hidden(hidden.select(1, static_cast<int64_t>(width) - 1));  // [B, V]
  sample_rows(last_logits, sampled_rows, weight_version, policy->config().max_position_embeddings);
  return !done();
}

void DecodeSession::sample_rows(const torch::Tensor& last_logits, const std::vector<size_t>& rows,
                                int64_t weight_version, int64_t max_positions) {
  if (rows.empty()) return;
  std::vector<int64_t> row_ids(rows.begin(), rows.end());
  const auto device = last_logits.device();
  auto index = torch::tensor(row_ids, torch::kInt64).to(device);
  const bool every_row = static_cast<int64_t>(rows.size()) == last_logits.size(0);
  auto log_probs = sampling_log_probs(every_row ? last_logits : last_logits.index_select(0, index), config_);  // [R, V]
  torch::Tensor chosen;
  if (config_.temperature == 0.0) {
    chosen = log_probs.argmax(1, /*keepdim=*/true);
  } else if (device.is_cpu()) {
    chosen = torch::multinomial(log_probs.exp(), 1, false, generator_);
  } else {
    chosen = sample_on_device(log_probs, torch::rand({log_probs.size(0), 1}, generator_, torch::kFloat64).to(device));
  }
  // Read back through raw pointers: one item() per row and value would cost
  // more than the sampling itself at large batch sizes. On a GPU only these
  // R ids, log-probs and positions cross to the host, not the [R, V] logits.
  const auto chosen_log_probs = log_probs.gather(1, chosen).squeeze(1).to(torch::kCPU).contiguous();
  const auto chosen_ids = chosen.squeeze(1).to(torch::kInt64).to(torch::kCPU).contiguous();
  const auto positions = cache_.next_position.index_select(0, index).to(torch::kCPU).contiguous();
  const float* chosen_log_prob = chosen_log_probs.data_ptr<float>();
  const int64_t* chosen_id = chosen_ids.data_ptr<int64_t>();
  const int64_t* position = positions.data_ptr<int64_t>();
  for (size_t i = 0; i < rows.size(); ++i) {
    const size_t row = rows[i];
    auto& sequence = sequences_[row];
    // The token sampled now would sit at position next_position: past the
    // context it cannot be part of a sequence the learner can score.
    if (position[i] >= max_positions) {
      sequence.finish = FinishReason::kContextFull;
      continue;
    }
    const int64_t token = chosen_id[i];
    sequence.tokens.push_back(token);
    sequence.logprobs.push_back(chosen_log_prob[i]);
    sequence.versions.push_back(weight_version);
    --budget_[row];
    const bool is_stop =
        std::find(config_.stop_tokens.begin(), config_.stop_tokens.end(), token) != config_.stop_tokens.end();
    if (is_stop) {
      sequence.finish = FinishReason::kStopToken;
    } else if (budget_[row] <= 0) {
      sequence.finish = FinishReason::kMaxNewTokens;
    } else if (position[i] + 1 >= max_positions) {
      sequence.finish = FinishReason::kContextFull;  // this token took the last position
    } else {
      pending_[row].push_back(token);
    }
  }
}

void DecodeSession::run(CausalLM& policy, int64_t weight_version) {
  while (step(policy, weight_version)) {
  }
}

void DecodeSession::continue_row(size_t row, const std::vector<int64_t>& observation_tokens, int64_t max_new_tokens) {
  auto& sequence = sequences_.at(row);
  if (sequence.finish == FinishReason::kRunning) {
    throw Error("continue_row: row " + std::to_string(row) + " is still generating");
  }
  if (observation_tokens.empty()) throw Error("continue_row: observation for row " + std::to_string(row) + " is empty");
  if (max_new_tokens < 1) throw Error("continue_row: max_new_tokens must be >= 1");
  // The last sampled token is not in the cache yet when the row stopped on it.
  if (sequence.finish == FinishReason::kStopToken || sequence.finish == FinishReason::kMaxNewTokens) {
    pending_[row].push_back(sequence.tokens.back());
  }
  pending_[row].insert(pending_[row].end(), observation_tokens.begin(), observation_tokens.end());
  sequence.finish = FinishReason::kRunning;
  sequence.turn_start = sequence.tokens.size();
  budget_[row] = max_new_tokens;
}

std::vector<GeneratedSequence> generate(CausalLM& policy, const std::vector<std::vector<int64_t>>& prompts,
                                        const SamplingConfig& config, uint64_t seed, int64_t weight_version) {
  DecodeSession session(prompts, config, seed);
  session.run(policy, weight_version);
  std::vector<GeneratedSequence> result;
  result.reserve(session.rows());
  for (size_t row = 0; row < session.rows(); ++row) result.push_back(session.sequence(row));
  return result;
}

}  // namespace sao::model
