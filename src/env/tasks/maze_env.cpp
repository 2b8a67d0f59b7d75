// The maze environment; see maze_env.hpp for the game.
#include "env/tasks/maze_env.hpp"
#include "env/env_config.hpp"

#include "base/error.hpp"
#include "base/hash.hpp"
#include "base/json_reader.hpp"

#include <cmath>
#include <cstdlib>
#include <deque>
#include <set>

namespace sao::env {

namespace {
constexpr uint64_t kMazeSplitSalt = 0x6d617a6531000000ULL;  // "maze1"
constexpr uint64_t kMazeHeldoutSeed = 0x5eed0002ULL;
constexpr int64_t kMaxAttempts = 2000000;
constexpr char kMoves[4] = {'N', 'E', 'S', 'W'};
constexpr int64_t kRowStep[4] = {-1, 0, 1, 0};
constexpr int64_t kColStep[4] = {0, 1, 0, -1};

int move_index(char move) {
  for (int i = 0; i < 4; ++i) {
    if (kMoves[i] == move) return i;
  }
  return -1;
}

std::string signed_digit(int64_t value) {
  return (value < 0 ? "-" : "+") + std::to_string(std::llabs(value));
}
}  // namespace

bool MazeLayout::open(int64_t row, int64_t col) const {
  return row >= 0 && col >= 0 && row < size && col < size && wall[static_cast<size_t>(row * size + col)] == 0;
}

std::vector<int64_t> MazeLayout::distances() const {
  std::vector<int64_t> distance(static_cast<size_t>(size * size), -1);
  std::deque<int64_t> queue = {goal};
  distance[static_cast<size_t>(goal)] = 0;
  while (!queue.empty()) {
    const int64_t cell = queue.front();
    queue.pop_front();
    for (int m = 0; m < 4; ++m) {
      const int64_t row = cell / size + kRowStep[m], col = cell % size + kColStep[m];
      if (!open(row, col) || distance[static_cast<size_t>(row * size + col)] >= 0) continue;
      distance[static_cast<size_t>(row * size + col)] = distance[static_cast<size_t>(cell)] + 1;
      queue.push_back(row * size + col);
    }
  }
  return distance;
}

std::string MazeLayout::key() const {
  std::string key = std::to_string(size) + ":";
  for (auto w : wall) key += w ? '#' : '.';
  return key + ":" + std::to_string(start) + ":" + std::to_string(goal);
}

std::string MazeLayout::render(int64_t at) const {
  std::string text;
  for (int64_t cell = 0; cell < size * size; ++cell) {
    text += cell == at ? 'A' : cell == goal ? 'G' : wall[static_cast<size_t>(cell)] ? '#' : '.';
    if (cell % size == size - 1) text += '\n';
  }
  return text;
}

std::string maze_observation(const MazeLayout& layout, int64_t at) {
  const int64_t row = at / layout.size, col = at % layout.size;
  std::string text;
  for (int m = 0; m < 4; ++m) text += layout.open(row + kRowStep[m], col + kColStep[m]) ? '.' : '#';
  return text + signed_digit(layout.goal % layout.size - col) + signed_digit(layout.goal / layout.size - row);
}

char maze_expert_move(const MazeLayout& layout, const std::vector<int64_t>& distances, int64_t at) {
  const int64_t row = at / layout.size, col = at % layout.size;
  const int64_t dx = layout.goal % layout.size - col, dy = layout.goal / layout.size - row;
  const bool vertical_first = std::llabs(dy) >= std::llabs(dx);
  int best = -1, best_score = -1;
  for (int m = 0; m < 4; ++m) {
    const int64_t r = row + kRowStep[m], c = col + kColStep[m];
    if (!layout.open(r, c) ||
        distances[static_cast<size_t>(r * layout.size + c)] != distances[static_cast<size_t>(at)] - 1) {
      continue;
    }
    const bool vertical = kRowStep[m] != 0;
    const int score = vertical == vertical_first ? 1 : 0;  // earlier moves win ties (N, E, S, W)
    if (score > best_score) best = m, best_score = score;
  }
  if (best < 0) throw Error("maze: no expert move from cell " + std::to_string(at) + " (goal unreachable)");
  return kMoves[best];
}

int64_t maze_apply_move(const MazeLayout& layout, int64_t at, char move) {
  const int m = move_index(move);
  if (m < 0) return at;
  const int64_t row = at / layout.size + kRowStep[m], col = at % layout.size + kColStep[m];
  return layout.open(row, col) ? row * layout.size + col : at;
}

MazeEnvironment::MazeEnvironment(MazeConfig config) : config_(config) {
  std::mt19937_64 rng(kMazeHeldoutSeed);
  std::set<std::string> seen;
  for (int64_t attempt = 0; static_cast<int64_t>(heldout_.size()) < config_.heldout_size; ++attempt) {
    if (attempt > kMaxAttempts) {
      throw Error("maze: only " + std::to_string(heldout_.size()) + " held-out layouts found for heldout_size " +
                  std::to_string(config_.heldout_size) + "; lower heldout_size or raise test_fraction/size");
    }
    auto layout = sample_layout(rng);
    if (is_heldout(layout) && seen.insert(layout.key()).second) heldout_.push_back(std::move(layout));
  }
}

bool MazeEnvironment::is_heldout(const MazeLayout& layout) const {
  return base::hash_unit(base::splitmix64(kMazeSplitSalt ^ hash_text(layout.key()))) < config_.test_fraction;
}

MazeLayout MazeEnvironment::sample_layout(std::mt19937_64& rng) const {
  const int64_t cells = config_.size * config_.size;
  for (int64_t attempt = 0; attempt < kMaxAttempts; ++attempt) {
    MazeLayout layout;
    layout.size = config_.size;
    layout.wall.assign(static_cast<size_t>(cells), 0);
    for (int64_t placed = 0; placed < config_.walls;) {
      auto& cell = layout.wall[static_cast<size_t>(rng() % static_cast<uint64_t>(cells))];
      if (cell == 0) cell = 1, ++placed;
    }
    layout.start = static_cast<int64_t>(rng() % static_cast<uint64_t>(cells));
    layout.goal = static_cast<int64_t>(rng() % static_cast<uint64_t>(cells));
    if (layout.wall[static_cast<size_t>(layout.start)] || layout.wall[static_cast<size_t>(layout.goal)]) continue;
    const int64_t distance = layout.distances()[static_cast<size_t>(layout.start)];
    if (distance >= config_.min_distance && distance <= config_.max_distance) return layout;
  }
  throw Error("maze: no layout with a shortest path of " + std::to_string(config_.min_distance) + ".." +
              std::to_string(config_.max_distance) + " moves; check size, walls and the distances");
}

MazeLayout MazeEnvironment::sample_train(uint64_t seed) const {
  std::mt19937_64 rng(base::splitmix64(seed));
  for (int64_t attempt = 0; attempt < 100000; ++attempt) {
    auto layout = sample_layout(rng);
    if (!is_heldout(layout)) return layout;
  }
  throw Error("maze: no training layout found; lower test_fraction");
}

EnvStep MazeEnvironment::start(MazeLayout layout) {
  layout_ = std::move(layout);
  distances_ = layout_.distances();
  position_ = layout_.start;
  turns_ = bumps_ = invalid_ = 0;
  limit_ = config_.turn_limit(distances_[static_cast<size_t>(position_)]);
  open_ = true;
  EnvStep result;
  result.observation = maze_observation(layout_, position_);
  result.info = {
      {"episode_key", layout_.key()}, {"distance", distances_[static_cast<size_t>(position_)]}, {"turn_limit", limit_}};
  return result;
}

EnvStep MazeEnvironment::reset(uint64_t seed) {
  return start(sample_train(seed));
}

EnvStep MazeEnvironment::reset_heldout(int64_t index) {
  if (index < 0 || index >= heldout_size()) {
    throw Error("maze: held-out index " + std::to_string(index) + " outside [0, " + std::to_string(heldout_size()) +
                ")");
  }
  return start(heldout_[static_cast<size_t>(index)]);
}

EnvStep MazeEnvironment::step(const std::string& action) {
  if (!open_) throw Error("maze: step() called before reset() or after the episode ended");
  const std::string move = trim_ascii(action);
  const int64_t before = distances_[static_cast<size_t>(position_)];
  if (move.size() == 1 && move_index(move[0]) >= 0) {
    const int64_t next = maze_apply_move(layout_, position_, move[0]);
    bumps_ += next == position_ ? 1 : 0;
    position_ = next;
  } else {
    ++invalid_;
  }
  ++turns_;
  const int64_t after = distances_[static_cast<size_t>(position_)];
  EnvStep result;
  result.reward = config_.shaping * static_cast<double>(before - after);
  const bool success = position_ == layout_.goal;
  if (success || turns_ >= limit_) {
    open_ = false;
    result.terminated = true;
    result.reward += success ? 1.0 : 0.0;
    result.info = {{"success", success ? 1 : 0},
                   {"accuracy", success ? 1.0 : 0.0},
                   {"turns", turns_},
                   {"bumps", bumps_},
                   {"invalid", invalid_},
                   {"timeout", !success}};
  } else {
    result.observation = maze_observation(layout_, position_);
  }
  return result;
}

EnvLimits MazeEnvironment::limits() const {
  EnvLimits limits;
  limits.max_turns = config_.turn_limit(config_.max_distance);
  limits.max_action_bytes = 1;
  limits.max_observation_bytes = 8;
  return limits;
}

std::vector<SftEpisode> MazeEnvironment::demonstrations(int64_t count, uint64_t seed) const {
  std::vector<SftEpisode> episodes;
  std::mt19937_64 noise_rng(base::splitmix64(seed ^ 0x6e6f697365ULL));
  for (int64_t i = 0; i < count; ++i) {
    const auto layout = sample_train(base::splitmix64(seed) + static_cast<uint64_t>(i));
    const auto distances = layout.distances();
    int64_t at = layout.start;
    int64_t turns_left = config_.turn_limit(distances[static_cast<size_t>(at)]);
    SftEpisode episode;
    episode.prompt = maze_observation(layout, at);
    while (at != layout.goal) {
      // A random move costs at most one extra step to undo; allow it only
      // while the expert can still make the goal within the limit.
      const bool can_afford = turns_left - 1 >= distances[static_cast<size_t>(at)] + 1;
      const bool noisy = can_afford && static_cast<double>(noise_rng() >> 11) * 0x1.0p-53 < config_.sft_noise;
      const char move = noisy ? kMoves[noise_rng() % 4] : maze_expert_move(layout, distances, at);
      at = maze_apply_move(layout, at, move);
      --turns_left;
      episode.turns.push_back({std::string(1, move), at == layout.goal ? "" : maze_observation(layout, at), !noisy});
    }
    episodes.push_back(std::move(episode));
  }
  return episodes;
}

MazeConfig maze_config_from_json(const nlohmann::json& config, const std::string& where) {
  MazeConfig result;
  base::JsonReader reader(config, where);
  read_env_name(reader, MazeEnvironment::kName, where);
  // size <= 10 keeps every goal offset a single signed digit (8-byte observations).
  reader.read("size", result.size, base::IntRange{2, 10});
  reader.read("walls", result.walls, base::IntRange{0, 98});
  reader.read("min_distance", result.min_distance, base::IntRange{1, 100});
  reader.read("max_distance", result.max_distance, base::IntRange{1, 100});
  reader.read("slack", result.slack, base::IntRange{0, 1000});
  reader.read("test_fraction", result.test_fraction, base::RealRange{0.0, 1.0, true, true});
  reader.read("heldout_size", result.heldout_size, base::IntRange{0, 100000});
  reader.read("shaping", result.shaping, base::RealRange{-100.0, 100.0});
  reader.read("sft_noise", result.sft_noise, base::RealRange{0.0, 1.0, false, true});
  reader.reject_unknown_keys();
  if (result.walls > result.size * result.size - 2) {
    throw Error(where + ".walls: must be in [0, size*size - 2]");
  }
  if (result.max_distance < result.min_distance) throw Error(where + ".max_distance: must be >= min_distance");
  return result;
}

std::unique_ptr<Environment> make_maze_environment(const nlohmann::json& config, const std::string& where) {
  return std::make_unique<MazeEnvironment>(maze_config_from_json(config, where));
}

}  // namespace sao::env
