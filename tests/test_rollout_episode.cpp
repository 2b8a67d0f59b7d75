// The one episode state machine (rollout/episode_engine.hpp), which the
// rollout actor and held-out evaluation share. Pins the two behaviours that
// had drifted between their former copies: an empty reset observation is
// marked with <|obs|> (evaluation did, the rollout did not), and an
// environment that reports only "success" gives the episode accuracy 1/0
// (evaluation counted it, the rollout dropped it).
#include "rollout/episode_engine.hpp"

#include "base/error.hpp"
#include "env/environment.hpp"
#include "model/transformer.hpp"
#include "report/run_summary.hpp"
#include "test_tiny_model.hpp"
#include "tokenizer/byte_tokenizer.hpp"
#include "train/episode_eval.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

using sao::rollout::EnvOutcome;
using sao::rollout::EpisodeEngine;
using sao::rollout::EpisodeSettings;
using sao::rollout::RowState;

namespace {

sao::model::CausalLM tiny_policy() {
  torch::manual_seed(5);
  sao::model::CausalLM policy(sao_test::tiny_byte_model());
  policy->eval();
  return policy;
}

// Empty observation at reset; any action ends the episode with success and
// no accuracy field. Held-out episodes: 3.
class SuccessOnlyEnv : public sao::env::Environment {
 public:
  sao::env::EnvStep reset(uint64_t) override { return {"", 0.0, false, false, nlohmann::json::object()}; }
  sao::env::EnvStep step(const std::string&) override {
    return {"", 1.0, true, false, nlohmann::json{{"success", true}}};
  }
  std::string name() const override { return "success_only"; }
  int64_t heldout_size() const override { return 3; }
  sao::env::EnvStep reset_heldout(int64_t) override { return reset(0); }
  sao::env::EnvLimits limits() const override { return {1, 4, 0}; }
};

EpisodeSettings settings(int64_t max_turns = 1) {
  EpisodeSettings result;
  result.sampling.max_new_tokens = 3;
  result.max_turns = max_turns;
  return result;
}

// An engine with `rows` rows open (ids 0 .. rows - 1), waiting for their resets.
EpisodeEngine open_engine(const sao::tokenizer::Tokenizer& tokenizer, const EpisodeSettings& episode_settings,
                          size_t rows, uint64_t seed) {
  sao::model::EngineLimits limits;
  limits.kv_cache_tokens = 64 * static_cast<int64_t>(rows);
  EpisodeEngine engine(tokenizer, episode_settings, sao_test::tiny_byte_model(), limits, seed);
  for (size_t row = 0; row < rows; ++row) REQUIRE(engine.open() == row);
  return engine;
}

EnvOutcome text(const std::string& observation) {
  EnvOutcome outcome;
  outcome.observation = observation;
  return outcome;
}

}  // namespace

TEST_CASE("the env's info is read into typed signals; anything malformed counts as absent") {
  auto outcome = sao::rollout::outcome_of("o", 0.5, true, false,
                                          nlohmann::json{{"accuracy", 0.25}, {"success", 1}, {"regime_index", 2}});
  CHECK(outcome.observation == "o");
  CHECK(outcome.accuracy == 0.25);
  CHECK(outcome.success == 1);
  CHECK(outcome.regime_index == 2.0);
  auto bad = sao::rollout::outcome_of("", 0, false, false,
                                      nlohmann::json{{"accuracy", "high"}, {"success", "yes"}, {"regime_index", {}}});
  CHECK(std::isnan(bad.accuracy));
  CHECK(bad.success == -1);
  CHECK(std::isnan(bad.regime_index));
  CHECK(std::isnan(sao::rollout::outcome_of("", 0, false, false, nlohmann::json::array()).accuracy));
  // Counts: finite numbers under names of at most 64 bytes, at most 32 of them.
  nlohmann::json counts = {{"worked", 1},
                           {"half", 0.5},
                           {"text", "3"},
                           {"flag", true},
                           {"nan", nullptr},
                           {std::string(65, 'n'), 1},
                           {std::string(64, 'm'), 2}};
  auto counted = sao::rollout::outcome_of("", 0, true, false, nlohmann::json{{"counts", counts}});
  CHECK(counted.counts == std::map<std::string, double>{{"worked", 1.0}, {"half", 0.5}, {std::string(64, 'm'), 2.0}});
  CHECK(sao::rollout::outcome_of("", 0, true, false, nlohmann::json{{"counts", 7}}).counts.empty());
  nlohmann::json many = nlohmann::json::object();
  for (int i = 0; i < 40; ++i) many["c" + std::to_string(100 + i)] = i;
  const auto capped = sao::rollout::outcome_of("", 0, true, false, nlohmann::json{{"counts", many}}).counts;
  REQUIRE(capped.size() == sao::rollout::kMaxCounts);
  CHECK(capped.begin()->first == "c100");
  CHECK(capped.rbegin()->second == 31.0);
}

TEST_CASE("success and accuracy of a final step follow one rule") {
  EnvOutcome step;
  step.terminated = true;
  step.reward = 1.0;
  CHECK(sao::rollout::episode_succeeded(step));  // no signal: terminated with a positive reward
  CHECK(std::isnan(sao::rollout::episode_accuracy(step)));
  step.success = 0;
  CHECK_FALSE(sao::rollout::episode_succeeded(step));  // "success" wins over the reward
  CHECK(sao::rollout::episode_accuracy(step) == 0.0);
  step.success = -1;
  step.accuracy = 0.5;
  CHECK_FALSE(sao::rollout::episode_succeeded(step));
  CHECK(sao::rollout::episode_accuracy(step) == 0.5);
  step.success = 1;
  CHECK(sao::rollout::episode_succeeded(step));
  CHECK(sao::rollout::episode_accuracy(step) == 0.5);  // "accuracy" wins when both are given
}

TEST_CASE("rollout side: an empty reset observation is <|obs|>, and success alone gives accuracy 1") {
  const sao::tokenizer::ByteTokenizer tokenizer;
  auto policy = tiny_policy();
  auto batch = open_engine(tokenizer, settings(), 2, 11);
  SuccessOnlyEnv env;
  for (size_t row = 0; row < 2; ++row) {
    const auto first = env.reset(row);
    batch.reset_done(
        row, sao::rollout::outcome_of(first.observation, first.reward, first.terminated, first.truncated, first.info));
  }
  int64_t steps = 0;
  while (batch.any_generating()) {
    for (const auto& ended : batch.decode_step(policy, /*version=*/7)) {
      CHECK(batch.row(ended.row).state == RowState::kWaitingEnv);
      const auto reply = env.step(ended.action_text);
      batch.step_done(ended.row, sao::rollout::outcome_of(reply.observation, reply.reward, reply.terminated,
                                                          reply.truncated, reply.info));
    }
    REQUIRE(++steps <= 4);  // one turn of at most 3 new tokens
  }
  REQUIRE(batch.finished());
  for (size_t row = 0; row < 2; ++row) {
    const auto trajectory = batch.trajectory(row, /*group_id=*/40 + static_cast<int64_t>(row));
    REQUIRE(trajectory.tokens.size() >= 3);
    CHECK(trajectory.tokens[0] == tokenizer.bos_id());
    CHECK(trajectory.tokens[1] == *tokenizer.special_id("<|obs|>"));
    CHECK(trajectory.action_mask[1] == 0);
    CHECK(trajectory.action_mask[2] == 1);
    CHECK(trajectory.accuracy == 1.0);
    CHECK(trajectory.terminated);
    CHECK(trajectory.group_id == 40 + static_cast<int64_t>(row));
    CHECK(trajectory.total_reward() == doctest::Approx(1.0));
    for (size_t t = 0; t < trajectory.size(); ++t) {
      if (trajectory.action_mask[t]) CHECK(trajectory.policy_versions[t] == 7);
    }
    CHECK(batch.row(row).success);
  }
}

TEST_CASE("evaluation side: the same environment counts every held-out episode as a success") {
  const sao::tokenizer::ByteTokenizer tokenizer;
  auto policy = tiny_policy();
  sao::train::EpisodeEvalOptions options;
  options.max_new_tokens = 3;
  options.sample_transcripts = 1;
  const auto result = sao::train::evaluate_episodes(
      policy, tokenizer, [] { return std::make_unique<SuccessOnlyEnv>(); }, options, 3);
  CHECK(result.episodes == 3);
  CHECK(result.successes == 3);
  CHECK(result.errors == 0);
  CHECK(result.mean_turns == 1.0);
  CHECK(result.mean_reward == 1.0);
  REQUIRE(result.samples.size() == 1);
  CHECK(result.samples[0].find(" => success") != std::string::npos);
}

TEST_CASE("an episode ends at max_turns, on the env's word, or is lost with a reason") {
  const sao::tokenizer::ByteTokenizer tokenizer;
  auto policy = tiny_policy();
  auto batch = open_engine(tokenizer, settings(/*max_turns=*/2), 4, 11);
  batch.reset_done(0, text("a"));
  batch.reset_failed(1, "boom");
  EnvOutcome ended_at_reset = text("done already");
  ended_at_reset.terminated = true;
  batch.reset_done(2, ended_at_reset);
  CHECK(batch.resets_pending());
  batch.reset_done(3, text("b"));
  CHECK(batch.row(1).state == RowState::kLost);
  CHECK(batch.row(1).env_error);
  CHECK(batch.row(1).lost_reason == "reset: boom");
  CHECK(batch.row(2).state == RowState::kLost);
  CHECK_FALSE(batch.row(2).env_error);
  CHECK(batch.row(2).lost_reason == "the environment ended the episode at reset");
  int64_t turns_answered = 0;
  while (batch.any_generating()) {
    for (const auto& ended : batch.decode_step(policy, 0)) {
      if (ended.row == 3) {
        batch.step_failed(3, "env crashed");
        continue;
      }
      ++turns_answered;
      batch.step_done(ended.row, text("more"));  // never terminates on its own
    }
  }
  CHECK(turns_answered == 2);  // row 0 played max_turns = 2 turns
  CHECK(batch.finished());
  CHECK(batch.row(0).state == RowState::kFinished);
  CHECK(batch.row(0).turns.size() == 2);
  CHECK_FALSE(batch.row(0).terminated);  // cut by max_turns: the learner bootstraps
  CHECK_FALSE(batch.row(0).success);
  CHECK(batch.trajectory(0, 0).truncated);
  CHECK(batch.row(3).state == RowState::kLost);
  CHECK(batch.row(3).lost_reason == "step: env crashed");
  CHECK_THROWS_WITH_AS(batch.trajectory(3, 0), "episode engine: row 3 is not finished", sao::Error);
}

TEST_CASE("an observation that would overflow the context ends the episode as a truncation, not a throw") {
  // 64 positions; every turn takes at most 3 action tokens and a 20-byte
  // observation, so the third or fourth observation no longer fits.
  const sao::tokenizer::ByteTokenizer tokenizer;
  auto policy = tiny_policy();
  auto episode_settings = settings(/*max_turns=*/50);
  episode_settings.keep_transcripts = true;
  auto batch = open_engine(tokenizer, episode_settings, 3, 11);
  batch.reset_done(0, text("start"));
  batch.reset_done(1, text("go"));
  batch.reset_done(2, text(std::string(70, 'p')));  // no room to reply at all
  CHECK(batch.row(2).state == RowState::kLost);
  CHECK(batch.row(2).lost_reason ==
        "the prompt takes 71 tokens and leaves no room to reply in the model's context of 64 "
        "(model.max_position_embeddings)");
  const std::string observation(20, 'x');
  int64_t decode_steps = 0;
  while (batch.any_generating()) {
    for (const auto& ended : batch.decode_step(policy, 0)) batch.step_done(ended.row, text(observation));
    REQUIRE(++decode_steps <= 64);  // each decode step uses a position, so the context bounds them
  }
  REQUIRE(batch.finished());
  for (size_t row = 0; row < 2; ++row) {
    CAPTURE(row);
    CHECK(batch.row(row).state == RowState::kFinished);
    CHECK_FALSE(batch.row(row).terminated);
    CHECK_FALSE(batch.row(row).success);
    CHECK(batch.row(row).transcript.find("=> failure (context full)") != std::string::npos);
    const auto trajectory = batch.trajectory(row, 0);
    CHECK(trajectory.truncated);
    CHECK(trajectory.tokens.size() <= 64);
    // The observation that did not fit is not part of the trajectory: it ends on an action token.
    CHECK(trajectory.action_mask.back() == 1);
    CHECK(batch.row(row).turns.size() >= 2);  // the context held two turns before it was full
  }
}

namespace {
// Held-out episodes: `size`; reset_heldout(i) throws for every i in
// `failing` (every i when `failing` is empty and always_fail), and counts
// every call in *resets, so a test counts environment requests, not time.
class FailingResetEnv : public SuccessOnlyEnv {
 public:
  FailingResetEnv(int64_t size, std::vector<int64_t> failing, bool always_fail, int64_t* resets)
      : size_(size), failing_(std::move(failing)), always_fail_(always_fail), resets_(resets) {}
  int64_t heldout_size() const override { return size_; }
  sao::env::EnvStep reset_heldout(int64_t index) override {
    ++*resets_;
    if (always_fail_ || std::find(failing_.begin(), failing_.end(), index) != failing_.end()) {
      throw sao::Error("env 'failing': reset_heldout(" + std::to_string(index) + "): no reply within 1000 ms");
    }
    return reset(0);
  }

 private:
  int64_t size_;
  std::vector<int64_t> failing_;
  bool always_fail_;
  int64_t* resets_;
};
}  // namespace

TEST_CASE("evaluation: errored episodes are counted, not scored: accuracy is over the answered ones") {
  const sao::tokenizer::ByteTokenizer tokenizer;
  auto policy = tiny_policy();
  sao::train::EpisodeEvalOptions options;
  options.max_new_tokens = 3;
  options.batch_size = 2;
  options.max_failures_in_a_row = 5;  // two failures, never two in a row: not dead
  int64_t resets = 0;
  const auto result = sao::train::evaluate_episodes(
      policy, tokenizer,
      [&] {
        return std::make_unique<FailingResetEnv>(5, std::vector<int64_t>{1, 3}, false, &resets);
      },
      options, 3);
  CHECK(resets == 5);
  CHECK(result.episodes == 5);
  CHECK(result.errors == 2);
  CHECK(result.successes == 3);
  CHECK(result.success_rate == 1.0);  // 3 of the 3 answered; the old rule said 3 of 5
  CHECK(result.solved == std::vector<uint8_t>{1, 0, 1, 0, 1});
  CHECK(sao::report::heldout_errors_note(2, 5) ==
        " -- WARNING: 2 of 5 held-out episodes lost to environment errors (not scored; the accuracy is over the 3 "
        "answered)");
  CHECK(sao::report::heldout_errors_note(0, 5).empty());
}

TEST_CASE("evaluation: an environment failing max_failures_in_a_row calls in a row is dead after that many") {
  const sao::tokenizer::ByteTokenizer tokenizer;
  auto policy = tiny_policy();
  sao::train::EpisodeEvalOptions options;
  options.max_new_tokens = 3;
  options.batch_size = 4;
  options.max_failures_in_a_row = 3;
  int64_t resets = 0;
  std::string message;
  try {
    sao::train::evaluate_episodes(
        policy, tokenizer,
        [&] { return std::make_unique<FailingResetEnv>(100, std::vector<int64_t>{}, true, &resets); }, options, 3);
  } catch (const sao::env::EnvironmentDead& error) {
    message = error.what();
  }
  // 3 requests, not one per held-out problem (100).
  CHECK(resets == 3);
  CHECK(message ==
        "environment 'success_only' is dead: 3 consecutive failures (train.max_env_failures_in_a_row 3); the last: "
        "env 'failing': reset_heldout(2): no reply within 1000 ms");
  CHECK_FALSE(policy->is_training());  // left in the mode it was found in
}

TEST_CASE("a failure streak: a success between failures resets it; once dead it stays dead") {
  sao::env::FailureStreak streak(2, "e");
  CHECK_FALSE(streak.failure("a"));
  streak.success();
  CHECK_FALSE(streak.failure("b"));
  CHECK(streak.length() == 1);
  CHECK(streak.failure("c"));
  CHECK(streak.dead());
  streak.success();
  CHECK(streak.dead());
  CHECK(streak.describe() ==
        "environment 'e' is dead: 2 consecutive failures (train.max_env_failures_in_a_row 2); the last: c");
  sao::env::FailureStreak never(0, "e");
  for (int i = 0; i < 10; ++i) CHECK_FALSE(never.failure("x"));
  CHECK_FALSE(never.dead());
}

TEST_CASE("continuous batching: a row that ends frees its slot; the next episode joins while others are mid-turn") {
  const sao::tokenizer::ByteTokenizer tokenizer;
  auto policy = tiny_policy();
  auto episode_settings = settings(/*max_turns=*/3);
  auto batch = open_engine(tokenizer, episode_settings, 2, 17);
  batch.reset_done(0, text("a"));
  batch.reset_done(1, text("b"));
  // Row 0 ends on its first step; row 1 plays three turns. Row 0's slot opens
  // row 2 as soon as row 0 is closed, while row 1 still plays.
  bool row2_opened = false;
  std::vector<int64_t> turn_versions_of_row1;
  int64_t version = 0;
  while (batch.open_rows() > 0) {
    for (const auto& ended : batch.decode_step(policy, version)) {
      if (ended.row == 1) {
        turn_versions_of_row1.push_back(batch.row(1).current.versions.front());
        batch.step_done(1, text("more"));
      } else {
        EnvOutcome done = text("");
        done.terminated = true;
        done.reward = 1.0;
        batch.step_done(ended.row, done);
      }
    }
    ++version;  // a weight switch between every two steps
    for (const auto id : batch.row_ids()) {
      if (batch.row(id).state != RowState::kFinished) continue;
      if (id == 0) {
        CHECK(batch.row(1).state != RowState::kFinished);  // row 1 is still playing
        CHECK(batch.row(0).success);
        batch.close(0);
        const auto next = batch.open();
        CHECK(next == 2);
        batch.reset_done(next, text("c"));
        row2_opened = true;
        CHECK(batch.row(2).state == RowState::kGenerating);
        continue;
      }
      if (id == 1) {
        const auto trajectory = batch.trajectory(1, 0);
        // Every action token records the version of the step that sampled it.
        std::vector<int64_t> versions;
        for (size_t t = 0; t < trajectory.size(); ++t)
          if (trajectory.action_mask[t]) versions.push_back(trajectory.policy_versions[t]);
        CHECK(std::is_sorted(versions.begin(), versions.end()));
        CHECK(versions.front() == 0);
        CHECK(batch.row(1).turns.size() == 3);  // multi-turn across the refill
      }
      batch.close(id);
    }
  }
  CHECK(row2_opened);
  CHECK(turn_versions_of_row1.size() == 3);
  CHECK(batch.engine().stats().blocks_in_use == 0);
}

TEST_CASE("a lost episode gives its blocks back at once; a full pool makes a new episode wait, then resume") {
  const sao::tokenizer::ByteTokenizer tokenizer;
  auto policy = tiny_policy();
  sao::model::EngineLimits limits;
  limits.block_size = 4;
  limits.kv_cache_tokens = 8;  // one turn: BOS + <|obs|> + 3 new tokens = 5 tokens = 2 blocks: the whole pool
  EpisodeEngine batch(tokenizer, settings(), sao_test::tiny_byte_model(), limits, 5);
  const auto first = batch.open();
  const auto second = batch.open();
  batch.reset_done(first, text(""));
  batch.reset_done(second, text(""));
  batch.decode_step(policy, 0);
  CHECK(batch.engine().stats().blocks_in_use == 2);
  CHECK(batch.engine().stats().waiting == 1);
  CHECK(batch.row(second).state == RowState::kGenerating);  // mid-turn, queued for blocks
  // The first episode's env fails mid-episode: lost, and its blocks return.
  std::vector<sao::rollout::TurnEnd> ended;
  while (ended.empty()) ended = batch.decode_step(policy, 0);
  REQUIRE(ended.front().row == first);
  batch.step_failed(first, "env crashed");
  CHECK(batch.row(first).state == RowState::kLost);
  CHECK(batch.engine().stats().blocks_in_use == 0);
  CHECK(batch.has_decode_work());
  while (batch.any_generating()) {
    for (const auto& turn : batch.decode_step(policy, 1)) {
      EnvOutcome done = text("");
      done.terminated = true;
      batch.step_done(turn.row, done);
    }
  }
  CHECK(batch.row(second).state == RowState::kFinished);
  CHECK_FALSE(batch.row(second).turns.front().action_tokens.empty());  // it ran once blocks were free
  CHECK(batch.engine().stats().blocks_in_use == 0);
}
