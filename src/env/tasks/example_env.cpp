// The example ("echo") environment; see example_env.hpp for the game and
// for what each part demonstrates.
#include "env/tasks/example_env.hpp"
#include "env/env_config.hpp"

#include "base/error.hpp"
#include "base/hash.hpp"
#include "base/json_reader.hpp"

#include <set>

namespace sao::env {

namespace {
// Split hashes are salted per environment so two environments with similar
// content do not share their held-out sets by accident.
constexpr uint64_t kExampleSplitSalt = 0x6578616d706c6531ULL;  // "example1"
// The held-out list is built from a constant seed: identical on every run.
constexpr uint64_t kExampleHeldoutSeed = 0x5eed0001ULL;

std::string key_of(const ExampleEnvironment::Words& words) {
  std::string key;
  for (const auto& word : words) key += (key.empty() ? "" : " ") + word;
  return key;
}
}  // namespace

ExampleEnvironment::ExampleEnvironment(ExampleConfig config) : config_(config) {
  // Build the held-out split once. Bounded: the word space is huge for any
  // valid config (26^word_length words per turn), so this ends quickly.
  std::mt19937_64 rng(kExampleHeldoutSeed);
  std::set<Words> seen;
  for (int64_t attempt = 0; static_cast<int64_t>(heldout_.size()) < config_.heldout_size; ++attempt) {
    if (attempt > 1000000) {
      throw Error("example environment: only " + std::to_string(heldout_.size()) + " held-out episodes found for " +
                  std::to_string(config_.heldout_size) + " requested; lower heldout_size or raise test_fraction");
    }
    auto words = sample_words(rng);
    if (is_heldout(words) && seen.insert(words).second) heldout_.push_back(std::move(words));
  }
}

bool ExampleEnvironment::is_heldout(const Words& words) const {
  return base::hash_unit(base::splitmix64(kExampleSplitSalt ^ hash_text(key_of(words)))) < config_.test_fraction;
}

ExampleEnvironment::Words ExampleEnvironment::sample_words(std::mt19937_64& rng) const {
  // Portable sampling: use raw 64-bit draws, never std::uniform_int_distribution
  // (its output differs between standard libraries).
  Words words;
  for (int64_t t = 0; t < config_.turns; ++t) {
    std::string word;
    for (int64_t i = 0; i < config_.word_length; ++i) word += static_cast<char>('a' + rng() % 26);
    words.push_back(std::move(word));
  }
  return words;
}

ExampleEnvironment::Words ExampleEnvironment::sample_train(uint64_t seed) const {
  std::mt19937_64 rng(base::splitmix64(seed));
  for (int attempt = 0; attempt < 100000; ++attempt) {
    auto words = sample_words(rng);
    if (!is_heldout(words)) return words;
  }
  throw Error("example environment: no training episode found; lower test_fraction");
}

EnvStep ExampleEnvironment::start(Words words) {
  words_ = std::move(words);
  turn_ = 0;
  correct_ = 0;
  open_ = true;
  EnvStep result;
  result.observation = observation_for(words_[0]);
  result.info = {{"episode_key", key_of(words_)}};
  return result;
}

EnvStep ExampleEnvironment::reset(uint64_t seed) {
  return start(sample_train(seed));
}

EnvStep ExampleEnvironment::reset_heldout(int64_t index) {
  if (index < 0 || index >= heldout_size()) {
    throw Error("example environment: held-out index " + std::to_string(index) + " outside [0, " +
                std::to_string(heldout_size()) + ")");
  }
  return start(heldout_[static_cast<size_t>(index)]);
}

EnvStep ExampleEnvironment::step(const std::string& action) {
  // Guard first: stepping a finished episode is a caller bug, never a reward.
  if (!open_) throw Error("example environment: step() called before reset() or after the episode ended");
  // Compare after trimming whitespace: a trailing space is not worth a zero.
  const bool correct = trim_ascii(action) == words_[turn_];
  correct_ += correct ? 1 : 0;
  ++turn_;
  EnvStep result;
  result.reward = correct ? 1.0 / static_cast<double>(config_.turns) : 0.0;  // per-turn reward
  if (turn_ == words_.size()) {
    open_ = false;
    result.terminated = true;  // the game is over by its own rules: no bootstrap
    result.info = {{"accuracy", static_cast<double>(correct_) / static_cast<double>(config_.turns)},
                   {"success", correct_ == config_.turns ? 1 : 0},
                   {"learner_step", learner_step_}};
  } else {
    result.observation = observation_for(words_[turn_]);
    result.info = {{"correct", correct}};
  }
  return result;
}

EnvLimits ExampleEnvironment::limits() const {
  EnvLimits limits;
  limits.max_turns = config_.turns;
  limits.max_action_bytes = config_.word_length;
  limits.max_observation_bytes = static_cast<int64_t>(observation_for(std::string(config_.word_length, 'a')).size());
  return limits;
}

std::vector<SftEpisode> ExampleEnvironment::demonstrations(int64_t count, uint64_t seed) const {
  std::vector<SftEpisode> episodes;
  for (int64_t i = 0; i < count; ++i) {
    const auto words = sample_train(base::splitmix64(seed) + static_cast<uint64_t>(i));
    SftEpisode episode;
    episode.prompt = observation_for(words[0]);
    for (size_t t = 0; t < words.size(); ++t) {
      // The expert echoes; the observation is what the env shows next.
      episode.turns.push_back({words[t], t + 1 < words.size() ? observation_for(words[t + 1]) : "", true});
    }
    episodes.push_back(std::move(episode));
  }
  return episodes;
}

ExampleConfig example_config_from_json(const nlohmann::json& config, const std::string& where) {
  ExampleConfig result;
  base::JsonReader reader(config, where);
  read_env_name(reader, ExampleEnvironment::kName, where);
  reader.read("turns", result.turns, base::IntRange{1, 32});
  reader.read("word_length", result.word_length, base::IntRange{1, 16});
  reader.read("test_fraction", result.test_fraction, base::RealRange{0.0, 1.0, true, true});
  reader.read("heldout_size", result.heldout_size, base::IntRange{0, 10000});
  reader.reject_unknown_keys();
  return result;
}

std::unique_ptr<Environment> make_example_environment(const nlohmann::json& config, const std::string& where) {
  return std::make_unique<ExampleEnvironment>(example_config_from_json(config, where));
}

}  // namespace sao::env
