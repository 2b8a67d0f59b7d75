// The example environment: the template for new environments and a fixture
// for tests. Copy these two files, rename, and replace the game.
//
// The game ("echo"): each turn the environment shows a short lowercase word
// and the policy must write it back. An episode has `turns` words (default
// 3); each correct echo earns 1/turns on that turn (a per-turn reward), so a
// perfect episode returns 1. After the last word the episode is terminated and
// info["accuracy"] is the fraction echoed correctly.
//
//   reset(7)      -> observation "say kov"
//   step("kov")   -> reward 0.333, observation "say bep"
//   step("bep")   -> reward 0.333, observation "say tah"
//   step("tax")   -> reward 0,     terminated, info {"accuracy": 0.667, ...}
//
// What it demonstrates, and every new environment should have:
//   - strict config reading (unknown keys are errors naming `where`),
//   - seeded, reproducible reset (all randomness from the seed),
//   - a held-out split fixed by a hash of the episode's content (the word
//     list), so no seed can ever produce a held-out episode in training,
//   - step() before reset or after the end throws sao::Error,
//   - limits() stating turn and size bounds,
//   - demonstrations() for the supervised warm start,
//   - on_training_step(), here only recorded (shown in info["learner_step"]).
//
// Config keys (the env's config section): name ("example", optional),
// turns (3), word_length (3), test_fraction (0.2), heldout_size (32).
#pragma once

#include "env/environment.hpp"

#include <random>
#include <string>
#include <vector>

namespace sao::env {

struct ExampleConfig {
  int64_t turns = 3;
  int64_t word_length = 3;
  double test_fraction = 0.2;
  int64_t heldout_size = 32;
};

class ExampleEnvironment final : public Environment {
 public:
  explicit ExampleEnvironment(ExampleConfig config);

  EnvStep reset(uint64_t seed) override;
  EnvStep step(const std::string& action) override;
  // The one spelling of its name: registry, config section, name().
  static constexpr const char* kName = "example";
  std::string name() const override { return kName; }

  int64_t heldout_size() const override { return static_cast<int64_t>(heldout_.size()); }
  EnvStep reset_heldout(int64_t index) override;
  void on_training_step(int64_t learner_step) override { learner_step_ = learner_step; }
  EnvLimits limits() const override;
  std::vector<SftEpisode> demonstrations(int64_t count, uint64_t seed) const override;

  // The content of one episode: its words in order.
  using Words = std::vector<std::string>;
  static std::string observation_for(const std::string& word) { return "say " + word; }
  bool is_heldout(const Words& words) const;

 private:
  Words sample_words(std::mt19937_64& rng) const;  // any split
  Words sample_train(uint64_t seed) const;         // rejection-samples the training split
  EnvStep start(Words words);

  ExampleConfig config_;
  std::vector<Words> heldout_;  // fixed, built once from a constant seed
  Words words_;
  size_t turn_ = 0;  // index of the word being asked
  int64_t correct_ = 0;
  bool open_ = false;  // an episode is running
  int64_t learner_step_ = 0;
};

ExampleConfig example_config_from_json(const nlohmann::json& config, const std::string& where);
std::unique_ptr<Environment> make_example_environment(const nlohmann::json& config, const std::string& where);

}  // namespace sao::env
