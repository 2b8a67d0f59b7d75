// Continuous batching over the block pool; see decode_engine.hpp.
#include "model/decode_engine.hpp"

#include "base/error.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>

namespace sao::model {

void EngineLimits::validate(const std::string& source) const {
  if (block_size < 1 || block_size > 4096) throw Error(source + ".kv_block_size: must be in [1, 4096]");
  if (kv_cache_tokens < block_size) {
    throw Error(source + ".kv_cache_tokens: must hold at least one block (" + std::to_string(block_size) + " tokens)");
  }
  if (prefill_chunk_tokens < 1) throw Error(source + ".prefill_chunk_tokens: must be >= 1");
}

DecodeEngine::DecodeEngine(const ModelConfig& model, SamplingConfig sampling, EngineLimits limits, uint64_t seed)
    : max_positions_(model.max_position_embeddings),
      sampling_(std::move(sampling)),
      limits_(limits),
      generator_(at::detail::createCPUGenerator(seed)),
      pool_(model, limits.kv_cache_tokens, limits.block_size) {
  sampling_.validate("sampling");
  limits_.validate("rollout");
}

DecodeEngine::Sequence& DecodeEngine::at(SequenceId id, const char* what) {
  const auto it = sequences_.find(id);
  if (it == sequences_.end()) throw Error(std::string(what) + ": no sequence " + std::to_string(id));
  return it->second;
}

SequenceState DecodeEngine::state(SequenceId id) const {
  const auto it = sequences_.find(id);
  if (it == sequences_.end()) throw Error("decode engine: no sequence " + std::to_string(id));
  return it->second.state;
}

const GeneratedSequence& DecodeEngine::sequence(SequenceId id) const {
  const auto it = sequences_.find(id);
  if (it == sequences_.end()) throw Error("decode engine: no sequence " + std::to_string(id));
  return it->second.generated;
}

int64_t DecodeEngine::context_tokens(SequenceId id) const {
  const auto it = sequences_.find(id);
  if (it == sequences_.end()) throw Error("decode engine: no sequence " + std::to_string(id));
  return static_cast<int64_t>(it->second.context.size());
}

int64_t DecodeEngine::blocks_needed(const Sequence& sequence) const {
  const int64_t tokens = std::min<int64_t>(static_cast<int64_t>(sequence.context.size()) + sequence.budget,
                                           max_positions_);
  return std::max<int64_t>(0, pool_.blocks_for(tokens) - static_cast<int64_t>(sequence.blocks.size()));
}

void DecodeEngine::check_fits(const Sequence& sequence, const std::string& what) const {
  const auto context = static_cast<int64_t>(sequence.context.size());
  // The context and one token of reply must fit the model.
  if (context + 1 > max_positions_) {
    throw Error(what + " takes " + std::to_string(context) + " tokens and leaves no room to reply in the model's context of " +
                std::to_string(max_positions_) + " (model.max_position_embeddings)");
  }
  const int64_t tokens = std::min<int64_t>(context + sequence.budget, max_positions_);
  if (pool_.blocks_for(tokens) > pool_.blocks_total()) {
    throw Error(what + " needs " + std::to_string(tokens) + " tokens of KV cache for its turn, more than the whole pool (" +
                std::to_string(pool_.capacity_tokens()) + " tokens, rollout.kv_cache_tokens)");
  }
}

SequenceId DecodeEngine::add(std::vector<int64_t> prompt, int64_t max_new_tokens) {
  if (prompt.empty()) throw Error("decode engine: a prompt needs at least one token");
  if (max_new_tokens < 0) throw Error("decode engine: max_new_tokens must be >= 0");
  Sequence sequence;
  sequence.context = std::move(prompt);
  sequence.budget = max_new_tokens > 0 ? max_new_tokens : sampling_.max_new_tokens;
  check_fits(sequence, "the prompt");
  const SequenceId id = next_id_++;
  sequences_.emplace(id, std::move(sequence));
  queue_.push_back(id);
  return id;
}

void DecodeEngine::continue_turn(SequenceId id, const std::vector<int64_t>& observation, int64_t max_new_tokens) {
  auto& sequence = at(id, "continue_turn");
  if (sequence.state != SequenceState::kTurnEnded) {
    throw Error("continue_turn: sequence " + std::to_string(id) + " has not finished its turn");
  }
  if (observation.empty()) throw Error("continue_turn: the observation for sequence " + std::to_string(id) + " is empty");
  if (max_new_tokens < 1) throw Error("continue_turn: max_new_tokens must be >= 1");
  Sequence next;
  next.context = sequence.context;
  next.context.insert(next.context.end(), observation.begin(), observation.end());
  next.budget = max_new_tokens;
  check_fits(next, "sequence " + std::to_string(id) + " with its observation");
  sequence.context = std::move(next.context);
  sequence.budget = max_new_tokens;
  sequence.state = SequenceState::kWaiting;
  sequence.generated.finish = FinishReason::kRunning;
  sequence.generated.turn_start = sequence.generated.tokens.size();
  queue_.push_back(id);
}

void DecodeEngine::release(SequenceId id) {
  auto& sequence = at(id, "release");
  pool_.give_back(sequence.blocks);
  if (sequence.state == SequenceState::kWaiting) queue_.erase(std::find(queue_.begin(), queue_.end(), id));
  sequences_.erase(id);
}

bool DecodeEngine::preempt_for(SequenceId head) {
  // Only when nothing runs: the blocks are then all held by sequences that
  // wait (for the caller, or for more blocks). The newest waiting holder
  // gives its blocks back first; it keeps its place in the queue.
  for (auto it = queue_.rbegin(); it != queue_.rend(); ++it) {
    if (*it == head) continue;
    auto& victim = sequences_.at(*it);
    if (victim.blocks.empty()) continue;
    pool_.give_back(victim.blocks);
    victim.cached = 0;
    ++preemptions_;
    return true;
  }
  return false;
}

void DecodeEngine::admit() {
  if (!admission_open_) return;
  while (!queue_.empty()) {
    const SequenceId head = queue_.front();
    auto& sequence = sequences_.at(head);
    if (pool_.take(blocks_needed(sequence), sequence.blocks)) {
      sequence.state = SequenceState::kRunning;
      queue_.pop_front();
      continue;
    }
    const bool anything_running = std::any_of(sequences_.begin(), sequences_.end(), [](const auto& item) {
      return item.second.state == SequenceState::kRunning;
    });
    if (anything_running || !preempt_for(head)) return;
  }
}

bool DecodeEngine::has_work() const {
  bool anything_running = false;
  bool blocks_held_by_waiting = false;
  for (const auto& item : sequences_) {
    if (item.second.state == SequenceState::kRunning) anything_running = true;
    if (item.second.state == SequenceState::kWaiting && !item.second.blocks.empty()) blocks_held_by_waiting = true;
  }
  if (anything_running) return true;
  if (!admission_open_ || queue_.empty()) return false;
  const auto& head = sequences_.at(queue_.front());
  return blocks_needed(head) <= pool_.blocks_free() || blocks_held_by_waiting;
}

std::vector<SequenceId> DecodeEngine::step(CausalLM& policy, int64_t weight_version) {
  if (policy->config().max_position_embeddings != max_positions_) {
    throw Error("decode engine: made for a context of " + std::to_string(max_positions_) +
                " positions, stepped with a model of " + std::to_string(policy->config().max_position_embeddings));
  }
  tokens_last_step_ = 0;
  input_tokens_last_step_ = 0;
  longest_input_last_step_ = 0;
  std::vector<SequenceId> ended;
  admit();
  // Inference mode, not just no-grad: tensors made here never enter autograd,
  // so LibTorch skips version counting and view tracking on each of the few
  // hundred small ops of a step.
  c10::InferenceMode inference;
  // Every running sequence in id order: one new token for a decoding one,
  // its waiting input for the others, whose long inputs share the step's
  // prefill budget (the first always runs). All go through one call.
  std::vector<SequenceId> ids;
  std::vector<PagedRow> rows;
  std::vector<int64_t> last_index;  // per row: its last token's index in the call, -1 while its input is incomplete
  int64_t chunk_left = limits_.prefill_chunk_tokens;
  bool first_input = true;
  int64_t offset = 0;
  for (auto& item : sequences_) {
    auto& sequence = item.second;
    if (sequence.state != SequenceState::kRunning) continue;
    const auto pending = static_cast<int64_t>(sequence.context.size()) - sequence.cached;
    int64_t take = 1;
    if (pending > 1) {
      take = first_input ? std::min(pending, limits_.prefill_chunk_tokens) : std::min(pending, chunk_left);
      if (take <= 0) continue;
      first_input = false;
      chunk_left -= take;
    }
    const auto first = sequence.context.begin() + sequence.cached;
    ids.push_back(item.first);
    rows.push_back({&sequence.blocks, sequence.cached, std::vector<int64_t>(first, first + take)});
    offset += take;
    longest_input_last_step_ = std::max(longest_input_last_step_, take);
    last_index.push_back(take == pending ? offset - 1 : -1);
  }
  if (ids.empty()) return ended;
  const auto hidden = forward_paged(policy->model, pool_, rows);  // [N, D]
  std::vector<SequenceId> sampled_ids;
  std::vector<int64_t> sampled_rows;
  for (size_t r = 0; r < ids.size(); ++r) {
    auto& sequence = sequences_.at(ids[r]);
    sequence.cached += static_cast<int64_t>(rows[r].fresh.size());
    if (last_index[r] < 0) continue;
    sampled_ids.push_back(ids[r]);
    sampled_rows.push_back(last_index[r]);
  }
  input_tokens_last_step_ = offset;
  if (sampled_ids.empty()) return ended;
  const bool every_token = static_cast<int64_t>(sampled_rows.size()) == hidden.size(0);
  const auto last_hidden =
      every_token ? hidden : hidden.index_select(0, torch::tensor(sampled_rows, torch::kInt64).to(hidden.device()));
  sample(policy, sampled_ids, last_hidden, weight_version, ended);
  return ended;
}

void DecodeEngine::sample(CausalLM& policy, const std::vector<SequenceId>& ids, const torch::Tensor& last_hidden,
                          int64_t weight_version, std::vector<SequenceId>& ended) {
  // The LM head (the largest matmul of a small model) runs on one position
  // per sampled row, not on the whole input.
  const auto logits = policy->logits_from_hidden(last_hidden);  // [R, V]
  const auto log_probs = sampling_log_probs(logits, sampling_);
  const auto device = log_probs.device();
  torch::Tensor chosen;
  if (sampling_.temperature == 0.0) {
    chosen = log_probs.argmax(1, /*keepdim=*/true);
  } else if (device.is_cpu()) {
    chosen = torch::multinomial(log_probs.exp(), 1, false, generator_);
  } else {
    chosen = sample_on_device(log_probs, torch::rand({log_probs.size(0), 1}, generator_, torch::kFloat64).to(device));
  }
  // Read back through raw pointers: on a GPU only these R ids and log-probs
  // cross to the host, not the [R, V] logits.
  const auto chosen_log_probs = log_probs.gather(1, chosen).squeeze(1).to(torch::kCPU).contiguous();
  const auto chosen_ids = chosen.squeeze(1).to(torch::kInt64).to(torch::kCPU).contiguous();
  const float* chosen_log_prob = chosen_log_probs.data_ptr<float>();
  const int64_t* chosen_id = chosen_ids.data_ptr<int64_t>();
  for (size_t i = 0; i < ids.size(); ++i) {
    auto& sequence = sequences_.at(ids[i]);
    auto& generated = sequence.generated;
    // The token sampled now would sit at position context.size(): past the
    // model's context it cannot be part of a sequence the learner can score.
    const auto position = static_cast<int64_t>(sequence.context.size());
    if (position >= max_positions_) {
      generated.finish = FinishReason::kContextFull;
      sequence.state = SequenceState::kTurnEnded;
      ended.push_back(ids[i]);
      continue;
    }
    const int64_t token = chosen_id[i];
    sequence.context.push_back(token);
    generated.tokens.push_back(token);
    generated.logprobs.push_back(chosen_log_prob[i]);
    generated.versions.push_back(weight_version);
    --sequence.budget;
    ++tokens_last_step_;
    const auto& stops = sampling_.stop_tokens;
    if (std::find(stops.begin(), stops.end(), token) != stops.end()) {
      generated.finish = FinishReason::kStopToken;
    } else if (sequence.budget <= 0) {
      generated.finish = FinishReason::kMaxNewTokens;
    } else if (position + 1 >= max_positions_) {
      generated.finish = FinishReason::kContextFull;  // this token took the last position
    } else {
      continue;
    }
    sequence.state = SequenceState::kTurnEnded;
    ended.push_back(ids[i]);
  }
}

EngineStats DecodeEngine::stats() const {
  EngineStats stats;
  for (const auto& item : sequences_) {
    const auto& sequence = item.second;
    if (sequence.state == SequenceState::kRunning) ++stats.running;
    if (sequence.state == SequenceState::kWaiting) ++stats.waiting;
    if (sequence.state == SequenceState::kTurnEnded) ++stats.turn_ended;
    stats.tokens_cached += sequence.cached;
  }
  stats.blocks_total = pool_.blocks_total();
  stats.blocks_in_use = pool_.blocks_in_use();
  stats.peak_blocks_in_use = pool_.peak_blocks_in_use();
  stats.storage_bytes = pool_.storage_bytes();
  stats.peak_storage_bytes = pool_.peak_storage_bytes();
  stats.preemptions = preemptions_;
  return stats;
}

}  // namespace sao::model
