// The maze environment, the multi-turn SFT batch builder and the held-out
// episode evaluator. Why these checks: the maze is the agentic task a tiny
// model is warm-started on, so its format must be exactly what the model sees,
// the expert must always win (or the warm start teaches failure), episodes
// must really be multi-turn, and the SFT layout must match the rollout's
// token for token.
#include "base/error.hpp"
#include "base/hash.hpp"
#include "env/tasks/maze_env.hpp"
#include "model/transformer.hpp"
#include "tokenizer/byte_tokenizer.hpp"
#include "train/episode_eval.hpp"
#include "train/episode_sft.hpp"

#include <doctest/doctest.h>

#include <map>

using sao::env::MazeConfig;
using sao::env::MazeEnvironment;
using sao::tokenizer::ByteTokenizer;

namespace {

bool valid_observation(const std::string& text) {
  if (text.size() != 8) return false;
  for (int i = 0; i < 4; ++i) {
    if (text[static_cast<size_t>(i)] != '#' && text[static_cast<size_t>(i)] != '.') return false;
  }
  return (text[4] == '+' || text[4] == '-') && std::isdigit(static_cast<unsigned char>(text[5])) &&
         (text[6] == '+' || text[6] == '-') && std::isdigit(static_cast<unsigned char>(text[7]));
}

// Plays the expert through the environment; returns the final step.
sao::env::EnvStep play_expert(MazeEnvironment& env, sao::env::EnvStep step, int64_t& turns) {
  turns = 0;
  while (!step.done()) {
    step = env.step(std::string(1, env.expert_action()));
    ++turns;
    if (!step.done()) CHECK(valid_observation(step.observation));
  }
  return step;
}

}  // namespace

TEST_CASE("maze: observation format and expert success on training and held-out layouts") {
  MazeEnvironment env({});
  std::map<int64_t, int> turn_histogram;
  for (uint64_t seed = 0; seed < 300; ++seed) {
    auto step = env.reset(seed);
    CAPTURE(env.layout().render(env.position()));
    REQUIRE(valid_observation(step.observation));
    const int64_t distance = step.info["distance"].get<int64_t>();
    CHECK(distance >= 3);
    CHECK(distance <= 6);
    CHECK(step.info["turn_limit"].get<int64_t>() == distance + 4);
    int64_t turns = 0;
    step = play_expert(env, step, turns);
    CHECK(step.terminated);
    CHECK(step.reward == 1.0);
    CHECK(step.info["success"].get<int>() == 1);
    CHECK(turns == distance);  // the expert walks a shortest path
    ++turn_histogram[turns];
  }
  // Every episode is multi-turn (>= 3 turns), with a spread of lengths.
  CHECK(turn_histogram.begin()->first >= 3);
  CHECK(turn_histogram.size() >= 3);
  for (int64_t i = 0; i < env.heldout_size(); ++i) {
    auto step = env.reset_heldout(i);
    CHECK(env.is_heldout(env.layout()));
    int64_t turns = 0;
    CHECK(play_expert(env, step, turns).info["success"].get<int>() == 1);
  }
}

TEST_CASE("maze: the observation describes the neighbourhood and the goal offset") {
  sao::env::MazeLayout layout;
  layout.size = 3;
  layout.wall = {0, 1, 0,  //
                 0, 0, 0,  //
                 0, 0, 0};
  layout.start = 4;  // centre
  layout.goal = 2;   // top right
  CHECK(sao::env::maze_observation(layout, 4) == "#...+1-1");
  CHECK(sao::env::maze_observation(layout, 0) == "##.#+2+0");
  const auto distances = layout.distances();
  CHECK(distances[4] == 2);
  CHECK(sao::env::maze_apply_move(layout, 4, 'N') == 4);  // wall: a bump
  CHECK(sao::env::maze_apply_move(layout, 4, 'E') == 5);
  CHECK(sao::env::maze_apply_move(layout, 0, 'W') == 0);  // edge
  CHECK(sao::env::maze_expert_move(layout, distances, 4) == 'E');
}

TEST_CASE("maze: bumps, invalid actions, the turn limit and shaping") {
  MazeEnvironment env({});
  auto step = env.reset(5);
  const int64_t limit = step.info["turn_limit"].get<int64_t>();
  for (int64_t t = 0; t + 1 < limit; ++t) {
    step = env.step(t % 2 == 0 ? "x" : "north");
    CHECK_FALSE(step.done());
    CHECK(step.reward == 0.0);
  }
  step = env.step("");
  CHECK(step.terminated);  // out of turns is a loss by the rules: no bootstrap
  CHECK(step.reward == 0.0);
  CHECK(step.info["success"].get<int>() == 0);
  CHECK(step.info["timeout"].get<bool>());
  CHECK(step.info["invalid"].get<int64_t>() == limit);
  CHECK_THROWS_AS(env.step("N"), sao::Error);

  MazeConfig shaped;
  shaped.shaping = 0.1;
  MazeEnvironment shaped_env(shaped);
  step = shaped_env.reset(5);
  const int64_t distance = step.info["distance"].get<int64_t>();
  double total = 0.0;
  while (!step.done()) {
    step = shaped_env.step(std::string(1, shaped_env.expert_action()));
    total += step.reward;
  }
  CHECK(total == doctest::Approx(1.0 + 0.1 * static_cast<double>(distance)));

  CHECK_THROWS_WITH_AS(sao::env::make_maze_environment({{"size", 11}}, "cfg.task"), doctest::Contains("cfg.task.size"),
                       sao::Error);
  CHECK_THROWS_WITH_AS(sao::env::make_maze_environment({{"wals", 3}}, "cfg.task"), doctest::Contains("wals"),
                       sao::Error);
}

TEST_CASE("maze: demonstrations replay through the environment and always succeed") {
  MazeConfig config;
  config.sft_noise = 0.5;
  MazeEnvironment env(config);
  const auto demos = env.demonstrations(60, 11);
  int noisy = 0;
  for (size_t i = 0; i < demos.size(); ++i) {
    auto step = env.reset(sao::base::splitmix64(11) + i);
    REQUIRE(step.observation == demos[i].prompt);
    CHECK(demos[i].turns.size() >= 3);
    for (const auto& turn : demos[i].turns) {
      REQUIRE_FALSE(step.done());
      if (turn.train) CHECK(std::string(1, env.expert_action()) == turn.action);
      noisy += turn.train ? 0 : 1;
      step = env.step(turn.action);
      CHECK(step.observation == turn.observation);
    }
    CHECK(step.info["success"].get<int>() == 1);
  }
  CHECK(noisy > 0);
}

TEST_CASE("episode SFT: the token layout is the rollout's, with loss on trained actions only") {
  const ByteTokenizer tokenizer;
  sao::env::SftEpisode episode;
  episode.prompt = "ab";
  episode.turns = {{"N", "xy", true}, {"E", "", false}, {"S", "", true}};
  const auto tokenized = sao::train::tokenize_episode(tokenizer, episode);
  const std::vector<int64_t> expected = {ByteTokenizer::kBos,
                                         'a',
                                         'b',
                                         'N',
                                         ByteTokenizer::kEos,
                                         'x',
                                         'y',
                                         'E',
                                         ByteTokenizer::kEos,
                                         ByteTokenizer::kObs,
                                         'S',
                                         ByteTokenizer::kEos};
  CHECK(tokenized.tokens == expected);
  CHECK(tokenized.trained == std::vector<uint8_t>{0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1, 1});

  sao::env::SftEpisode short_episode{"q", {{"A", "", true}}, ""};
  const auto batch = sao::train::make_episode_sft_batch(tokenizer, {episode, short_episode});
  CHECK(batch.input_ids.sizes() == torch::IntArrayRef({2, 12}));
  // Row 1: BOS q A EOS PAD...: targets A (at position 1) and EOS (position 2).
  CHECK(batch.input_ids[1][4].item<int64_t>() == ByteTokenizer::kPad);
  CHECK(batch.target_mask[1].nonzero().view(-1).equal(torch::tensor({1, 2}, torch::kInt64)));
  CHECK(batch.target_mask[0].nonzero().view(-1).equal(torch::tensor({2, 3, 9, 10}, torch::kInt64)));
  CHECK_THROWS_WITH_AS(sao::train::make_episode_sft_batch(tokenizer, {episode}, 8), doctest::Contains("12 tokens"),
                       sao::Error);
}

TEST_CASE("a tiny model learns from maze transcripts and is evaluated on held-out mazes") {
  torch::manual_seed(0);
  sao::model::ModelConfig config;
  config.hidden_size = 48;
  config.intermediate_size = 96;
  config.num_hidden_layers = 2;
  config.num_attention_heads = 4;
  config.num_key_value_heads = 2;
  sao::model::CausalLM policy(config);
  sao::model::init_weights(*policy, 3);
  const ByteTokenizer tokenizer;
  MazeEnvironment env({});

  const auto probe = sao::train::make_episode_sft_batch(tokenizer, env.demonstrations(32, 777), 128);
  auto probe_loss = [&] {
    torch::NoGradGuard no_grad;
    return sao::train::sft_loss(policy->forward(probe.input_ids), probe).item<double>();
  };
  const double before = probe_loss();
  sao::config::SftSection options;
  options.steps = 60;
  options.batch_size = 16;
  options.learning_rate = 3e-3;
  options.warmup_steps = 5;
  options.log_every = 0;
  const auto result = sao::train::run_episode_sft(policy, env, tokenizer, options, 1, nullptr);
  const double after = probe_loss();
  MESSAGE("maze SFT probe loss " << before << " -> " << after << " in " << result.seconds << " s");
  CHECK(after < 0.5 * before);

  sao::train::EpisodeEvalOptions eval;
  eval.episodes = 24;
  eval.batch_size = 10;  // several batches, reused environments
  const auto evaluation = sao::train::evaluate_episodes(
      policy, tokenizer, [] { return std::make_unique<MazeEnvironment>(MazeConfig{}); }, eval, 5);
  MESSAGE("held-out maze success " << evaluation.success_rate << ", mean turns " << evaluation.mean_turns);
  for (const auto& sample : evaluation.samples) MESSAGE(sample);
  CHECK(evaluation.episodes == 24);
  CHECK(evaluation.errors == 0);
  CHECK(evaluation.mean_turns >= 1.0);
  CHECK(evaluation.success_rate >= 0.0);
  CHECK(evaluation.success_rate <= 1.0);
  CHECK(evaluation.samples.size() == 3);
  // Greedy evaluation is deterministic.
  const auto again = sao::train::evaluate_episodes(
      policy, tokenizer, [] { return std::make_unique<MazeEnvironment>(MazeConfig{}); }, eval, 6);
  CHECK(again.successes == evaluation.successes);
  CHECK(again.mean_reward == evaluation.mean_reward);
}
