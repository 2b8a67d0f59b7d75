// The paged KV cache and the decode engine: attention over scattered blocks
// gives the logits of a full forward pass (1e-5, fp32); sequences join and
// leave between steps; the pool's exhaustion makes prompts wait, never
// truncates; released sequences give their blocks back; multi-turn keeps the
// cache; preemption recomputes without changing what was recorded.
#include "base/error.hpp"
#include "model/decode_engine.hpp"
#include "model/generation.hpp"
#include "model/paged_kv.hpp"
#include "model/transformer.hpp"

#include "test_tiny_model.hpp"

#include <doctest/doctest.h>

#include <vector>

using sao::model::CausalLM;
using sao::model::DecodeEngine;
using sao::model::EngineLimits;
using sao::model::FinishReason;
using sao::model::KVBlockPool;
using sao::model::ModelConfig;
using sao::model::PagedRow;
using sao::model::SequenceState;

namespace {

using sao_test::tiny_config;
using sao_test::tiny_policy;

// Log-softmax of a full forward pass over `tokens` [T, V].
torch::Tensor full_log_probs(CausalLM& policy, const std::vector<int64_t>& tokens) {
  torch::NoGradGuard no_grad;
  return torch::log_softmax(policy->forward(torch::tensor(tokens, torch::kInt64).unsqueeze(0))[0], -1);
}

// Every token of every turn: its recorded log-prob equals a full pass's at
// its position in `context` (the sequence's whole context in order).
void check_log_probs(CausalLM& policy, const std::vector<int64_t>& context, const sao::model::GeneratedSequence& out,
                     const std::vector<size_t>& positions) {
  const auto log_probs = full_log_probs(policy, context);
  REQUIRE(positions.size() == out.tokens.size());
  for (size_t i = 0; i < out.tokens.size(); ++i) {
    CAPTURE(i);
    REQUIRE(context[positions[i]] == out.tokens[i]);
    CHECK(
        out.logprobs[i] ==
        doctest::Approx(log_probs[static_cast<int64_t>(positions[i]) - 1][out.tokens[i]].item<float>()).epsilon(1e-4));
  }
}

EngineLimits limits(int64_t tokens, int64_t block_size = 4, int64_t chunk = 1024) {
  EngineLimits result;
  result.kv_cache_tokens = tokens;
  result.block_size = block_size;
  result.prefill_chunk_tokens = chunk;
  return result;
}

sao::model::SamplingConfig sampling(int64_t max_new_tokens) {
  sao::model::SamplingConfig config;
  config.max_new_tokens = max_new_tokens;
  return config;
}

}  // namespace

TEST_CASE("attention over scattered blocks gives the logits of a full pass, for ragged rows in one call") {
  auto policy = tiny_policy();
  torch::NoGradGuard no_grad;
  c10::InferenceMode inference;
  KVBlockPool pool(tiny_config(), 64, 4);
  // Blocks taken row by row in turn, so each row's blocks are interleaved with the other's.
  std::vector<int64_t> blocks_a, blocks_b;
  for (int i = 0; i < 4; ++i) {
    REQUIRE(pool.take(1, blocks_b));
    REQUIRE(pool.take(1, blocks_a));
  }
  CHECK(blocks_a == std::vector<int64_t>{1, 3, 5, 7});
  const std::vector<int64_t> a = {1, 4, 8, 15, 16, 23, 30, 2, 9, 12, 5};
  const std::vector<int64_t> b = {3, 9, 1, 30, 7, 6, 11};
  const auto full_a = policy->forward(torch::tensor(a, torch::kInt64).unsqueeze(0))[0];  // [T, V]
  const auto full_b = policy->forward(torch::tensor(b, torch::kInt64).unsqueeze(0))[0];
  // Call 1: a prefills 5 tokens, b 3; the call's tokens are flattened, a's first.
  auto logits = policy->logits_from_hidden(sao::model::forward_paged(
      policy->model, pool,
      {PagedRow{&blocks_a, 0, {a.begin(), a.begin() + 5}}, PagedRow{&blocks_b, 0, {b.begin(), b.begin() + 3}}}));
  REQUIRE(logits.size(0) == 8);
  CHECK((logits.narrow(0, 0, 5) - full_a.narrow(0, 0, 5)).abs().max().item<float>() < 1e-5);
  CHECK((logits.narrow(0, 5, 3) - full_b.narrow(0, 0, 3)).abs().max().item<float>() < 1e-5);
  // Call 2: ragged append across block edges: a decodes 1 token while b
  // takes 4 (one call, two attention groups).
  logits = policy->logits_from_hidden(sao::model::forward_paged(
      policy->model, pool, {PagedRow{&blocks_a, 5, {a[5]}}, PagedRow{&blocks_b, 3, {b.begin() + 3, b.end()}}}));
  REQUIRE(logits.size(0) == 5);
  CHECK((logits[0] - full_a[5]).abs().max().item<float>() < 1e-5);
  CHECK((logits.narrow(0, 1, 4) - full_b.narrow(0, 3, 4)).abs().max().item<float>() < 1e-5);
  // Then one token at a time, as decoding does.
  for (size_t t = 6; t < a.size(); ++t) {
    logits = policy->logits_from_hidden(
        sao::model::forward_paged(policy->model, pool, {PagedRow{&blocks_a, static_cast<int64_t>(t), {a[t]}}}));
    CHECK((logits[0] - full_a[static_cast<int64_t>(t)]).abs().max().item<float>() < 1e-5);
  }
}

TEST_CASE("a bf16 replica decodes over a bf16 pool: its paged logits match its own full pass, near the fp32 model's") {
  auto policy = tiny_policy();
  auto replica = tiny_policy();
  replica->to(torch::kBFloat16);
  torch::NoGradGuard no_grad;
  c10::InferenceMode inference;
  KVBlockPool pool(tiny_config(), 64, 4);
  std::vector<int64_t> blocks_a, blocks_b;
  REQUIRE(pool.take(3, blocks_a));
  REQUIRE(pool.take(2, blocks_b));
  const std::vector<int64_t> a = {1, 4, 8, 15, 16, 23, 30, 2, 9, 12, 5};
  const std::vector<int64_t> b = {3, 9, 1, 30, 7, 6, 11};
  const auto input = [](const std::vector<int64_t>& tokens) {
    return torch::tensor(tokens, torch::kInt64).unsqueeze(0);
  };
  const auto replica_a = replica->forward(input(a))[0].to(torch::kFloat32);
  const auto replica_b = replica->forward(input(b))[0].to(torch::kFloat32);
  CHECK((replica->forward(input(a)).scalar_type() == torch::kBFloat16));
  // Its paged pass (a prefill of both, then a decodes token by token) against its own full pass.
  auto logits = replica->logits_from_hidden(sao::model::forward_paged(
      replica->model, pool, {PagedRow{&blocks_a, 0, {a.begin(), a.begin() + 6}}, PagedRow{&blocks_b, 0, b}}));
  CHECK((pool.keys().front().scalar_type() == torch::kBFloat16));
  const float scale = replica_a.abs().max().item<float>();
  // bf16 keeps 8 bits of mantissa: the two passes round in other orders.
  const float bf16_tolerance = 0.02f * scale;
  CHECK((logits.narrow(0, 0, 6).to(torch::kFloat32) - replica_a.narrow(0, 0, 6)).abs().max().item<float>() <
        bf16_tolerance);
  CHECK((logits.narrow(0, 6, 7).to(torch::kFloat32) - replica_b).abs().max().item<float>() < bf16_tolerance);
  for (size_t t = 6; t < a.size(); ++t) {
    logits = replica->logits_from_hidden(
        sao::model::forward_paged(replica->model, pool, {PagedRow{&blocks_a, static_cast<int64_t>(t), {a[t]}}}));
    CHECK((logits[0].to(torch::kFloat32) - replica_a[static_cast<int64_t>(t)]).abs().max().item<float>() <
          bf16_tolerance);
  }
  // And the replica against the fp32 model it was rounded from.
  const auto fp32_a = policy->forward(input(a))[0];
  CHECK((replica_a - fp32_a).abs().max().item<float>() < 0.05f * scale);
  CHECK((replica_a - fp32_a).abs().max().item<float>() > 0.0f);  // it is a bf16 model, not the fp32 one
  // Sampling log-probs stay fp32 whatever the logits' dtype.
  CHECK((sao::model::sampling_log_probs(logits, sampling(1)).scalar_type() == torch::kFloat32));
}

TEST_CASE("a row whose blocks have no room, or a pool sized below one block, is refused by name") {
  auto policy = tiny_policy();
  c10::InferenceMode inference;
  KVBlockPool pool(tiny_config(), 16, 4);
  std::vector<int64_t> blocks;
  REQUIRE(pool.take(1, blocks));
  CHECK_THROWS_WITH_AS(sao::model::forward_paged(policy->model, pool, {PagedRow{&blocks, 2, {1, 2, 3}}}),
                       "forward_paged: row 0 needs 5 cached tokens but its blocks hold 4", sao::Error);
  std::vector<int64_t> more;
  CHECK_FALSE(pool.take(4, more));  // 3 free: nothing taken
  CHECK(more.empty());
  CHECK(pool.blocks_free() == 3);
  pool.give_back(blocks);
  CHECK(pool.blocks_free() == 4);
  blocks = {2};
  CHECK_THROWS_WITH_AS(pool.give_back(blocks), "KV cache: block 2 given back twice or never taken", sao::Error);
  CHECK_THROWS_WITH_AS(KVBlockPool(tiny_config(), 0, 4), "KV cache: capacity must be >= 1 token, got 0", sao::Error);
  EngineLimits bad = limits(8, 16);
  CHECK_THROWS_WITH_AS(bad.validate("rollout"), "rollout.kv_cache_tokens: must hold at least one block (16 tokens)",
                       sao::Error);
}

TEST_CASE("the pool's storage grows with the blocks in use, not with its capacity") {
  auto policy = tiny_policy();
  DecodeEngine engine(tiny_config(), sampling(4), limits(64 * 16, 4), 3);
  CHECK(engine.stats().storage_bytes == 0);
  engine.add({1, 2, 3, 4});  // 8 tokens: 2 blocks
  engine.step(policy, 0);
  const auto stats = engine.stats();
  CHECK(stats.blocks_total == 256);
  CHECK(stats.blocks_in_use == 2);
  // 2 blocks of 4 slots + the padding slot, 2 layers x (keys + values) x 2 heads x 8 dims x 4 bytes.
  CHECK(stats.storage_bytes == 9 * 2 * 2 * 2 * 8 * 4);
  CHECK(engine.pool().bytes_per_token() == 2 * 2 * 2 * 8 * 4);
}

TEST_CASE("a sequence added while others decode joins the next step; every token's log-prob is exact") {
  auto policy = tiny_policy();
  DecodeEngine engine(tiny_config(), sampling(6), limits(256), 5);
  const std::vector<int64_t> prompt_a = {1, 5, 6}, prompt_b = {1, 7, 7, 7, 9, 2, 4};
  const auto a = engine.add(prompt_a);
  CHECK(engine.step(policy, 0).empty());
  CHECK(engine.tokens_last_step() == 1);
  engine.step(policy, 0);
  const auto b = engine.add(prompt_b);
  CHECK(engine.state(b) == SequenceState::kWaiting);
  engine.step(policy, 0);  // b's prefill and a's decode in the same step
  CHECK(engine.tokens_last_step() == 2);
  CHECK(engine.input_tokens_last_step() == 1 + 7);
  CHECK(engine.sequence(a).tokens.size() == 3);
  CHECK(engine.sequence(b).tokens.size() == 1);
  std::vector<sao::model::SequenceId> ended;
  while (engine.has_work()) {
    for (const auto id : engine.step(policy, 0)) ended.push_back(id);
  }
  CHECK(ended == std::vector<sao::model::SequenceId>{a, b});  // a finished its 6 tokens first
  for (const auto& [id, prompt] : {std::make_pair(a, prompt_a), std::make_pair(b, prompt_b)}) {
    const auto& out = engine.sequence(id);
    CHECK(out.finish == FinishReason::kMaxNewTokens);
    std::vector<int64_t> context(prompt);
    std::vector<size_t> positions;
    for (const auto token : out.tokens) {
      positions.push_back(context.size());
      context.push_back(token);
    }
    check_log_probs(policy, context, out, positions);
    CHECK(engine.context_tokens(id) == static_cast<int64_t>(context.size()));
  }
}

TEST_CASE("a long prompt is prefilled in chunks while another sequence decodes; the result is unchanged") {
  auto policy = tiny_policy();
  DecodeEngine engine(tiny_config(), sampling(3), limits(256, 4, /*chunk=*/4), 9);
  const std::vector<int64_t> short_prompt = {1, 2}, long_prompt = {1, 3, 5, 7, 9, 11, 13, 15, 17, 19};
  const auto first = engine.add(short_prompt);
  const auto second = engine.add(long_prompt);
  engine.step(policy, 0);  // short prompt (2) + 2 tokens of the long one (chunk of 4 shared)
  CHECK(engine.input_tokens_last_step() == 4);
  CHECK(engine.sequence(first).tokens.size() == 1);
  CHECK(engine.sequence(second).tokens.empty());
  engine.step(policy, 0);  // 1 decode + 4 prefill
  CHECK(engine.input_tokens_last_step() == 1 + 4);
  CHECK(engine.sequence(second).tokens.empty());
  engine.step(policy, 0);  // 1 decode + the last 4: the long prompt samples its first token
  CHECK(engine.sequence(second).tokens.size() == 1);
  while (engine.has_work()) engine.step(policy, 0);
  const auto& out = engine.sequence(second);
  std::vector<int64_t> context(long_prompt);
  std::vector<size_t> positions;
  for (const auto token : out.tokens) {
    positions.push_back(context.size());
    context.push_back(token);
  }
  check_log_probs(policy, context, out, positions);
}

TEST_CASE("weights may change between two steps; each token records its version") {
  auto policy_a = tiny_policy(1);
  auto policy_b = tiny_policy(2);
  DecodeEngine engine(tiny_config(), sampling(6), limits(256), 11);
  const auto first = engine.add({1, 3, 5});
  const auto second = engine.add({1, 4});
  engine.step(policy_a, 10);
  engine.step(policy_a, 10);
  while (engine.has_work()) engine.step(policy_b, 11);
  for (const auto id : {first, second}) {
    const auto& versions = engine.sequence(id).versions;
    REQUIRE(versions.size() == 6);
    CHECK(versions[0] == 10);
    CHECK(versions[1] == 10);
    CHECK(versions[5] == 11);
  }
  // The first two tokens were sampled by policy_a on a cache it built alone.
  const auto& seq = engine.sequence(first);
  const auto log_probs = full_log_probs(policy_a, {1, 3, 5, seq.tokens[0]});
  CHECK(seq.logprobs[0] == doctest::Approx(log_probs[2][seq.tokens[0]].item<float>()).epsilon(1e-4));
  CHECK(seq.logprobs[1] == doctest::Approx(log_probs[3][seq.tokens[1]].item<float>()).epsilon(1e-4));
}

TEST_CASE("a full pool makes a prompt wait; it runs once a sequence gives its blocks back") {
  auto policy = tiny_policy();
  // 8 tokens: one turn of prompt 3 + 5 new tokens takes the whole pool.
  DecodeEngine engine(tiny_config(), sampling(5), limits(8, 4), 2);
  const auto first = engine.add({1, 2, 3});
  const auto second = engine.add({4, 5, 6});
  engine.step(policy, 0);
  CHECK(engine.state(first) == SequenceState::kRunning);
  CHECK(engine.state(second) == SequenceState::kWaiting);
  CHECK(engine.stats().blocks_in_use == 2);
  CHECK(engine.stats().waiting == 1);
  while (engine.state(first) == SequenceState::kRunning) engine.step(policy, 0);
  // The first sequence's turn ended but it keeps its blocks (its caller may continue it).
  CHECK(engine.state(second) == SequenceState::kWaiting);
  CHECK_FALSE(engine.has_work());
  CHECK(engine.sequence(second).tokens.empty());
  engine.release(first);
  CHECK(engine.stats().blocks_in_use == 0);
  CHECK(engine.has_work());
  while (engine.has_work()) engine.step(policy, 0);
  CHECK(engine.sequence(second).tokens.size() == 5);  // its whole turn: nothing truncated
  CHECK(engine.sequence(second).finish == FinishReason::kMaxNewTokens);
  engine.release(second);
  CHECK(engine.stats().blocks_in_use == 0);
  CHECK(engine.stats().peak_blocks_in_use == 2);
}

TEST_CASE("a turn larger than the whole pool is refused naming both sizes; an empty prompt too") {
  DecodeEngine engine(tiny_config(), sampling(5), limits(8, 4), 2);
  CHECK_THROWS_WITH_AS(engine.add({1, 2, 3, 4}),
                       "the prompt needs 9 tokens of KV cache for its turn, more than the whole pool (8 tokens, "
                       "rollout.kv_cache_tokens)",
                       sao::Error);
  CHECK_THROWS_WITH_AS(engine.add({}), "decode engine: a prompt needs at least one token", sao::Error);
  CHECK_THROWS_WITH_AS(engine.add(std::vector<int64_t>(64, 3)),
                       "the prompt takes 64 tokens and leaves no room to reply in the model's context of 64 "
                       "(model.max_position_embeddings)",
                       sao::Error);
  CHECK(engine.stats().waiting == 0);
}

TEST_CASE("multi-turn: continue_turn keeps the cache and decodes again; released mid-turn frees the blocks") {
  auto policy = tiny_policy();
  DecodeEngine engine(tiny_config(), sampling(3), limits(64), 5);
  const auto id = engine.add({1, 3});
  const auto other = engine.add({1, 4, 4}, 20);  // 23 tokens: 6 blocks, still running below
  while (engine.state(id) != SequenceState::kTurnEnded) engine.step(policy, 0);
  CHECK_THROWS_WITH(engine.continue_turn(other, {20}, 2), doctest::Contains("has not finished its turn"));
  const auto cached_before = engine.stats().tokens_cached;
  engine.continue_turn(id, {20, 21}, 2);
  CHECK(engine.stats().tokens_cached == cached_before);  // nothing recomputed
  while (engine.state(id) != SequenceState::kTurnEnded) engine.step(policy, 1);
  const auto& seq = engine.sequence(id);
  REQUIRE(seq.tokens.size() == 5);
  CHECK(seq.turn_start == 3);
  CHECK(seq.versions[3] == 1);
  const std::vector<int64_t> context = {1,  3,  seq.tokens[0], seq.tokens[1], seq.tokens[2],
                                        20, 21, seq.tokens[3], seq.tokens[4]};
  check_log_probs(policy, context, seq, {2, 3, 4, 7, 8});
  // The other sequence is released mid-turn (a lost episode): its blocks come back at once.
  REQUIRE(engine.state(other) == SequenceState::kRunning);
  const auto in_use = engine.stats().blocks_in_use;
  engine.release(other);
  CHECK(engine.stats().blocks_in_use == in_use - 6);
  CHECK_FALSE(engine.contains(other));
}

TEST_CASE("when every holder waits for more blocks, the newest is recomputed; its record is unchanged") {
  auto policy = tiny_policy();
  // 4 blocks of 4. Each first turn takes 2 blocks (prompt 3 + 3 new + ...).
  DecodeEngine engine(tiny_config(), sampling(3), limits(16, 4), 8);
  const auto first = engine.add({1, 2, 3, 4, 5});    // 5 + 3 = 8 tokens: 2 blocks
  const auto second = engine.add({6, 7, 8, 9, 10});  // 2 blocks: the pool is full
  while (engine.state(first) != SequenceState::kTurnEnded || engine.state(second) != SequenceState::kTurnEnded) {
    engine.step(policy, 0);
  }
  const auto before = engine.sequence(second);
  // Both continue with turns that need a third block each; nothing is free and nothing runs.
  engine.continue_turn(first, {11, 12}, 2);  // 8 + 2 + 2 = 12 tokens: 3 blocks
  engine.continue_turn(second, {13, 14}, 2);
  engine.step(policy, 1);
  CHECK(engine.stats().preemptions == 1);
  CHECK(engine.state(first) == SequenceState::kRunning);
  CHECK(engine.state(second) == SequenceState::kWaiting);
  while (engine.state(first) == SequenceState::kRunning) engine.step(policy, 1);
  CHECK_FALSE(engine.has_work());  // the first holds 3 blocks; the second needs 3
  engine.release(first);
  while (engine.has_work()) engine.step(policy, 1);
  const auto& after = engine.sequence(second);
  CHECK(after.finish == FinishReason::kMaxNewTokens);
  REQUIRE(after.tokens.size() == 5);
  for (size_t i = 0; i < 3; ++i) {  // the first turn's record is untouched
    CHECK(after.tokens[i] == before.tokens[i]);
    CHECK(after.logprobs[i] == before.logprobs[i]);
    CHECK(after.versions[i] == 0);
  }
  // The recomputed cache gives the exact log-probs of the new turn.
  const std::vector<int64_t> context = {
      6, 7, 8, 9, 10, after.tokens[0], after.tokens[1], after.tokens[2], 13, 14, after.tokens[3], after.tokens[4]};
  const auto log_probs = full_log_probs(policy, context);
  CHECK(after.logprobs[3] == doctest::Approx(log_probs[9][after.tokens[3]].item<float>()).epsilon(1e-4));
  CHECK(after.logprobs[4] == doctest::Approx(log_probs[10][after.tokens[4]].item<float>()).epsilon(1e-4));
}

TEST_CASE("closed admission holds queued turns while the running ones finish") {
  auto policy = tiny_policy();
  DecodeEngine engine(tiny_config(), sampling(4), limits(256), 4);
  const auto running = engine.add({1, 2});
  engine.step(policy, 0);
  engine.set_admission_open(false);
  const auto queued = engine.add({3, 4});
  while (engine.has_work()) engine.step(policy, 0);
  CHECK(engine.state(running) == SequenceState::kTurnEnded);
  CHECK(engine.state(queued) == SequenceState::kWaiting);
  CHECK(engine.sequence(queued).tokens.empty());
  engine.set_admission_open(true);
  CHECK(engine.has_work());
  while (engine.has_work()) engine.step(policy, 1);
  CHECK(engine.sequence(queued).versions == std::vector<int64_t>(4, 1));
}
