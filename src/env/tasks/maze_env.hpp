// The maze: an agentic multi-turn environment a ~1M-parameter byte-level
// model can learn. A size x size grid (default 5x5) holds a few wall cells, a
// start and a goal; the agent sees only its surroundings and where the goal
// lies, and moves one cell per turn.
//
// Observation (8 bytes, also the prompt at reset): the four neighbours in the
// order North, East, South, West ('#' wall or edge, '.' open), then the goal's
// offset as two signed digits, columns first (east positive) then rows (south
// positive):  "#..#+2-1" = walls north and west, goal 2 east and 1 north.
// Action: one letter "N", "E", "S" or "W" (surrounding whitespace ignored).
// Moving into a wall keeps the position (a bump); anything else is an invalid
// action and wastes the turn. Both are counted in the final info.
//
// Episodes: start and goal are drawn so that the shortest path is
// min_distance..max_distance moves (default 3..6: >= 3 turns always). The turn
// limit is shortest path + slack (default 4). Reaching the goal: reward 1,
// terminated, info {"success":1,"accuracy":1}. Running out of turns: reward 0,
// terminated (the deadline is part of the game), success 0. Optional shaping
// (off by default): each step also earns shaping * (distance before - distance
// after), distances along the shortest path.
//
// Split: held-out layouts (walls + start + goal) are those whose hash falls
// under test_fraction; reset() never yields one, reset_heldout(i) only them.
//
// Warm start: demonstrations() are BFS-expert transcripts; with probability
// sft_noise a turn is a random move kept as context but not trained (train =
// false), so the model sees off-path states and their expert recovery. Noise
// is only injected while the goal stays reachable in time, so every
// demonstration succeeds.
//
// Config keys: name ("maze"), size (5), walls (5), min_distance (3),
// max_distance (6), slack (4), test_fraction (0.1), heldout_size (200),
// shaping (0.0), sft_noise (0.2).
#pragma once

#include "env/environment.hpp"

#include <random>
#include <string>
#include <vector>

namespace sao::env {

struct MazeConfig {
  int64_t size = 5;
  int64_t walls = 5;
  int64_t min_distance = 3;
  int64_t max_distance = 6;
  int64_t slack = 4;
  double test_fraction = 0.1;
  int64_t heldout_size = 200;
  double shaping = 0.0;
  double sft_noise = 0.2;

  int64_t turn_limit(int64_t distance) const { return distance + slack; }
};

struct MazeLayout {
  int64_t size = 0;
  std::vector<uint8_t> wall;  // size*size, row-major, 1 = wall
  int64_t start = 0;          // cell index row*size + col
  int64_t goal = 0;

  bool open(int64_t row, int64_t col) const;
  // Shortest-path distance to the goal from every cell; -1 where unreachable.
  std::vector<int64_t> distances() const;
  std::string key() const;               // stable identity, e.g. for the split
  std::string render(int64_t at) const;  // rows of '#', '.', 'A' (agent), 'G'
};

// "#..#+2-1" for the agent at cell `at`.
std::string maze_observation(const MazeLayout& layout, int64_t at);
// The expert's move from `at` (one of "NESW"): along a shortest path,
// preferring the axis with the larger remaining offset, then N, E, S, W.
char maze_expert_move(const MazeLayout& layout, const std::vector<int64_t>& distances, int64_t at);
// The cell reached by `move` from `at` (unchanged when blocked).
int64_t maze_apply_move(const MazeLayout& layout, int64_t at, char move);

class MazeEnvironment final : public Environment {
 public:
  explicit MazeEnvironment(MazeConfig config);

  EnvStep reset(uint64_t seed) override;
  EnvStep step(const std::string& action) override;
  // The one spelling of its name: registry, config section, name().
  static constexpr const char* kName = "maze";
  std::string name() const override { return kName; }
  int64_t heldout_size() const override { return static_cast<int64_t>(heldout_.size()); }
  EnvStep reset_heldout(int64_t index) override;
  EnvLimits limits() const override;
  std::vector<SftEpisode> demonstrations(int64_t count, uint64_t seed) const override;

  bool is_heldout(const MazeLayout& layout) const;
  const MazeLayout& layout() const { return layout_; }
  int64_t position() const { return position_; }
  // The expert's next move in the running episode (for tests and baselines).
  char expert_action() const { return maze_expert_move(layout_, distances_, position_); }
  const MazeConfig& config() const { return config_; }

 private:
  MazeLayout sample_layout(std::mt19937_64& rng) const;  // any split
  MazeLayout sample_train(uint64_t seed) const;
  EnvStep start(MazeLayout layout);

  MazeConfig config_;
  std::vector<MazeLayout> heldout_;
  MazeLayout layout_;
  std::vector<int64_t> distances_;
  int64_t position_ = 0;
  int64_t turns_ = 0;
  int64_t limit_ = 0;
  int64_t bumps_ = 0;
  int64_t invalid_ = 0;
  bool open_ = false;
};

MazeConfig maze_config_from_json(const nlohmann::json& config, const std::string& where);
std::unique_ptr<Environment> make_maze_environment(const nlohmann::json& config, const std::string& where);

}  // namespace sao::env
