// An environment plugin: "How many a's in banana?" -> "3". One turn, reward 1
// for the right count; words from a small alphabet, a held-out split by a
// hash of the question, demonstrations for the warm start. Built out of tree
// against an installed sao (CMakeLists.txt next to this file).
#include "env/env_plugin.hpp"

#include <algorithm>
#include <random>

namespace {

class LetterCount final : public sao::env::Environment {
 public:
  LetterCount(const nlohmann::json& config, const std::string& where) {
    if (!config.is_object()) throw sao::Error(where + ": expected an object");
    for (const auto& item : config.items()) {
      if (item.key() == "name") continue;
      if (item.key() != "max_length") throw sao::Error(where + ": unknown key '" + item.key() + "' (max_length)");
      if (!item.value().is_number_integer() || item.value().get<int>() < 2 || item.value().get<int>() > 12) {
        throw sao::Error(where + ".max_length: must be an integer in [2, 12]");
      }
      max_length_ = item.value().get<int>();
    }
  }

  sao::env::EnvStep reset(uint64_t seed) override {
    // Draw until the question is a training one: held-out questions are never played in training.
    std::mt19937_64 rng(seed);
    do {
      draw(rng);
    } while (is_heldout(question_));
    return open();
  }

  sao::env::EnvStep reset_heldout(int64_t index) override {
    if (index < 0 || index >= heldout_size()) throw sao::Error("letter_count: held-out index out of range");
    // The index-th held-out question drawn from a fixed seed.
    std::mt19937_64 rng(0x5eed);
    for (int64_t found = -1; found < index;) {
      draw(rng);
      if (is_heldout(question_)) ++found;
    }
    return open();
  }

  sao::env::EnvStep step(const std::string& action) override {
    if (!open_) throw sao::Error("letter_count: step() before reset() or after the episode ended");
    open_ = false;
    const bool right = sao::env::trim_ascii(action) == std::to_string(count_);
    sao::env::EnvStep result;
    result.reward = right ? 1.0 : 0.0;
    result.terminated = true;
    result.info = {{"accuracy", right ? 1.0 : 0.0}};
    return result;
  }

  std::string name() const override { return "letter_count"; }
  int64_t heldout_size() const override { return 50; }

  std::vector<sao::env::SftEpisode> demonstrations(int64_t count, uint64_t seed) const override {
    LetterCount copy(*this);
    std::vector<sao::env::SftEpisode> episodes;
    for (int64_t i = 0; i < count; ++i) {
      const auto start = copy.reset(seed * 1000003 + static_cast<uint64_t>(i));
      episodes.push_back({start.observation, {{std::to_string(copy.count_), "", true}}});
    }
    return episodes;
  }

 private:
  template <typename Rng>
  void draw(Rng& rng) {
    const std::string alphabet = "abn";
    std::uniform_int_distribution<int> length(2, max_length_);
    std::uniform_int_distribution<int> letter(0, 2);
    std::string word;
    for (int i = length(rng); i > 0; --i) word += alphabet[static_cast<size_t>(letter(rng))];
    const char asked = alphabet[static_cast<size_t>(letter(rng))];
    count_ = static_cast<int>(std::count(word.begin(), word.end(), asked));
    question_ = std::string("How many ") + asked + "'s in " + word + "?";
  }
  static bool is_heldout(const std::string& question) {
    return sao::base::hash_unit(sao::env::hash_text(question)) < 0.1;
  }
  sao::env::EnvStep open() {
    open_ = true;
    sao::env::EnvStep result;
    result.observation = question_;
    result.info = {{"episode_key", question_}};
    return result;
  }

  int max_length_ = 6;
  std::string question_;
  int count_ = 0;
  bool open_ = false;
};

void register_letter_count(const sao::env::EnvironmentRegistrar& registrar) {
  registrar("letter_count", [](const nlohmann::json& config, const std::string& where) {
    return std::make_unique<LetterCount>(config, where);
  });
}

}  // namespace

SAO_ENV_PLUGIN(register_letter_count)
