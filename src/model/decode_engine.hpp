// The decode engine: continuous batching over a paged KV cache. Sequences
// come and go one at a time; every step() runs the input that waits
// (prompts and multi-turn observations, chunked when long) and one decode
// token for every other running sequence, then samples. A sequence whose
// turn ends keeps its blocks until its caller continues it with the next
// observation or releases it, so its slot can take the next prompt at once.
//
// Admission is first come, first served: a sequence waits until the pool
// has the blocks for its whole turn (its tokens so far plus the turn's
// budget, at most the model's context), so a running sequence never runs
// out of cache mid-turn. A request larger than the whole pool is refused
// with an error naming both sizes; otherwise it waits, and never truncates.
// When every sequence that holds blocks is waiting for more (multi-turn
// rows whose next turn does not fit), the newest of them gives its blocks
// back and is recomputed from its tokens when admitted again (vLLM's
// "recompute" preemption): its recorded log-probs and versions are kept.
//
// Every sampled token records its log-prob under the distribution it was
// drawn from and the weight version of the step (generation.hpp); the
// weights may change between any two steps, and the cached keys computed
// with older weights are kept, as SAO's rollout workers do.
#pragma once

#include "model/generation.hpp"
#include "model/paged_kv.hpp"

#include <ATen/core/Generator.h>

#include <cstdint>
#include <deque>
#include <map>
#include <vector>

namespace sao::model {

struct EngineLimits {
  int64_t kv_cache_tokens = 4096;  // the pool's capacity
  int64_t block_size = 4;          // tokens per block
  // Input tokens (prompts, observations) run per step across sequences; a
  // longer input is prefilled over several steps while the rest decode.
  int64_t prefill_chunk_tokens = 1024;
  // Throws sao::Error naming `source` and the key.
  void validate(const std::string& source) const;
};

using SequenceId = int64_t;

enum class SequenceState {
  kWaiting,    // in the admission queue (no blocks, or not enough for its turn)
  kRunning,    // holds its turn's blocks; prefilling or decoding
  kTurnEnded,  // its turn finished (sequence().finish says why); holds its blocks
};

struct EngineStats {
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t turn_ended = 0;
  int64_t blocks_total = 0;
  int64_t blocks_in_use = 0;
  int64_t peak_blocks_in_use = 0;
  int64_t tokens_cached = 0;  // tokens whose keys are in the pool now
  int64_t storage_bytes = 0;
  int64_t peak_storage_bytes = 0;
  int64_t preemptions = 0;  // sequences recomputed to free blocks (cumulative)
};

class DecodeEngine {
 public:
  DecodeEngine(const ModelConfig& model, SamplingConfig sampling, EngineLimits limits, uint64_t seed);

  // Queues a new sequence whose first turn may generate `max_new_tokens`
  // (0: the sampling config's). Throws sao::Error for an empty prompt, a
  // prompt that leaves no room to reply in the model's context, or a turn
  // larger than the whole pool.
  SequenceId add(std::vector<int64_t> prompt, int64_t max_new_tokens = 0);
  // Multi-turn: appends `observation` to a sequence whose turn ended and
  // queues its next turn (its blocks are kept). Same errors as add().
  void continue_turn(SequenceId id, const std::vector<int64_t>& observation, int64_t max_new_tokens);
  // Forgets the sequence (any state) and gives its blocks back.
  void release(SequenceId id);

  // One step with weights of `weight_version`; returns the sequences whose
  // turn ended in it, in id order.
  std::vector<SequenceId> step(CausalLM& policy, int64_t weight_version);
  // Something to run: a running sequence, or a waiting one that can be
  // admitted now (step() would do work).
  bool has_work() const;
  // While closed, waiting sequences are not admitted (running ones go on):
  // a rollout that switches weights only between turns drains its running
  // turns this way.
  void set_admission_open(bool open) { admission_open_ = open; }
  bool admission_open() const { return admission_open_; }

  bool contains(SequenceId id) const { return sequences_.count(id) > 0; }
  SequenceState state(SequenceId id) const;
  const GeneratedSequence& sequence(SequenceId id) const;
  // Tokens the sequence holds in its context (prompt, replies, observations).
  int64_t context_tokens(SequenceId id) const;
  EngineStats stats() const;
  const KVBlockPool& pool() const { return pool_; }
  int64_t tokens_last_step() const { return tokens_last_step_; }
  int64_t input_tokens_last_step() const { return input_tokens_last_step_; }
  // The most input tokens one sequence ran in the last step.
  int64_t longest_input_last_step() const { return longest_input_last_step_; }
  const SamplingConfig& sampling() const { return sampling_; }

 private:
  struct Sequence {
    std::vector<int64_t> context;  // every token in context order
    int64_t cached = 0;            // context[0, cached) have keys in `blocks`
    std::vector<int64_t> blocks;
    int64_t budget = 0;  // new tokens its turn may still generate
    SequenceState state = SequenceState::kWaiting;
    GeneratedSequence generated;
  };
  Sequence& at(SequenceId id, const char* what);
  // Blocks a sequence needs for the rest of its turn.
  int64_t blocks_needed(const Sequence& sequence) const;
  void check_fits(const Sequence& sequence, const std::string& what) const;
  void admit();
  bool preempt_for(SequenceId head);
  void sample(CausalLM& policy, const std::vector<SequenceId>& ids, const torch::Tensor& last_hidden,
              int64_t weight_version, std::vector<SequenceId>& ended);

  int64_t max_positions_;
  SamplingConfig sampling_;
  EngineLimits limits_;
  at::Generator generator_;
  KVBlockPool pool_;
  std::map<SequenceId, Sequence> sequences_;
  std::deque<SequenceId> queue_;  // waiting, first come first served
  SequenceId next_id_ = 0;
  bool admission_open_ = true;
  int64_t preemptions_ = 0;
  int64_t tokens_last_step_ = 0;
  int64_t input_tokens_last_step_ = 0;
  int64_t longest_input_last_step_ = 0;
};

}  // namespace sao::model
