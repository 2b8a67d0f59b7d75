// Trajectory validation and collation; see trajectory.hpp for the layout and
// the position convention.
#include "algo/trajectory.hpp"

#include "base/error.hpp"

#include <torch/torch.h>

#include <algorithm>

namespace sao::algo {

int64_t Trajectory::num_action_tokens() const {
  return static_cast<int64_t>(std::count_if(action_mask.begin(), action_mask.end(), [](uint8_t m) { return m != 0; }));
}

double Trajectory::total_reward() const {
  double total = 0.0;
  for (float r : rewards) total += r;
  return total;
}

int64_t Trajectory::oldest_version() const {
  int64_t oldest = std::numeric_limits<int64_t>::max();
  for (size_t t = 0; t < tokens.size(); ++t) {
    if (action_mask[t]) oldest = std::min(oldest, policy_versions[t]);
  }
  return oldest;
}

void Trajectory::validate(const std::string& where) const {
  auto fail = [&](const std::string& message) { throw Error(where + ": " + message); };
  const size_t n = tokens.size();
  if (n == 0) fail("has no tokens");
  auto check_size = [&](size_t size, const char* field) {
    if (size != n) {
      fail(std::string(field) + " has " + std::to_string(size) + " entries but tokens has " + std::to_string(n));
    }
  };
  check_size(action_mask.size(), "action_mask");
  check_size(behaviour_logprobs.size(), "behaviour_logprobs");
  check_size(policy_versions.size(), "policy_versions");
  check_size(rewards.size(), "rewards");
  if (terminated == truncated) fail("exactly one of terminated and truncated must be true");
  if (action_mask[0]) fail("token 0 is an action: a trajectory must start with at least one prompt token");
  for (size_t t = 0; t < n; ++t) {
    const std::string at = " at position " + std::to_string(t);
    if (tokens[t] < 0) fail("negative token id " + std::to_string(tokens[t]) + at);
    if (action_mask[t] > 1) fail("action_mask must be 0 or 1" + at);
    if (!action_mask[t] && rewards[t] != 0.0f)
      fail("reward " + std::to_string(rewards[t]) + " on a non-action token" + at);
    if (action_mask[t] && policy_versions[t] < 0) fail("action token has negative policy version" + at);
  }
  if (num_action_tokens() == 0) fail("has no action token: nothing to train on");
}

namespace {

void append_action_turn(Trajectory& trajectory, const Turn& turn, size_t index) {
  const std::string where = "make_trajectory: turn " + std::to_string(index);
  if (turn.action_tokens.empty()) throw Error(where + " has no action tokens");
  if (turn.logprobs.size() != turn.action_tokens.size() || turn.versions.size() != turn.action_tokens.size()) {
    throw Error(where + ": action_tokens, logprobs and versions must have the same length (" +
                std::to_string(turn.action_tokens.size()) + ", " + std::to_string(turn.logprobs.size()) + ", " +
                std::to_string(turn.versions.size()) + ")");
  }
  for (size_t i = 0; i < turn.action_tokens.size(); ++i) {
    trajectory.tokens.push_back(turn.action_tokens[i]);
    trajectory.action_mask.push_back(1);
    trajectory.behaviour_logprobs.push_back(turn.logprobs[i]);
    trajectory.policy_versions.push_back(turn.versions[i]);
    trajectory.rewards.push_back(0.0f);
  }
  trajectory.rewards.back() += static_cast<float>(turn.reward);
}

void append_observation(Trajectory& trajectory, const std::vector<int64_t>& tokens) {
  for (int64_t token : tokens) {
    trajectory.tokens.push_back(token);
    trajectory.action_mask.push_back(0);
    trajectory.behaviour_logprobs.push_back(0.0f);
    trajectory.policy_versions.push_back(-1);
    trajectory.rewards.push_back(0.0f);
  }
}

}  // namespace

Trajectory make_trajectory(const std::vector<int64_t>& prompt, const std::vector<Turn>& turns, double outcome_reward,
                           bool terminated, int64_t group_id) {
  if (turns.empty()) throw Error("make_trajectory: no turns");
  Trajectory trajectory;
  trajectory.terminated = terminated;
  trajectory.truncated = !terminated;
  trajectory.group_id = group_id;
  append_observation(trajectory, prompt);
  size_t last_action = 0;
  for (size_t i = 0; i < turns.size(); ++i) {
    append_action_turn(trajectory, turns[i], i);
    last_action = trajectory.tokens.size() - 1;
    append_observation(trajectory, turns[i].observation);
  }
  trajectory.rewards[last_action] += static_cast<float>(outcome_reward);
  trajectory.validate("make_trajectory");
  return trajectory;
}

Trajectory trajectory_from_generation(const std::vector<int64_t>& prompt, const model::GeneratedSequence& sequence,
                                      double outcome_reward, bool terminated, int64_t group_id) {
  Turn turn;
  turn.action_tokens = sequence.tokens;
  turn.logprobs = sequence.logprobs;
  turn.versions = sequence.versions;
  return make_trajectory(prompt, {turn}, outcome_reward, terminated, group_id);
}

TrajectoryBatch collate(const std::vector<Trajectory>& trajectories, int64_t pad_id) {
  if (trajectories.empty()) throw Error("collate: empty batch");
  size_t width = 0;
  for (size_t b = 0; b < trajectories.size(); ++b) {
    trajectories[b].validate("trajectory " + std::to_string(b));
    width = std::max(width, trajectories[b].size());
  }
  const auto batch = static_cast<int64_t>(trajectories.size());
  const auto steps = static_cast<int64_t>(width);
  TrajectoryBatch out;
  out.input_ids = torch::full({batch, steps}, pad_id, torch::kInt64);
  out.action_mask = torch::zeros({batch, steps}, torch::kBool);
  out.valid_mask = torch::zeros({batch, steps}, torch::kBool);
  out.behaviour_logprobs = torch::zeros({batch, steps}, torch::kFloat32);
  out.versions = torch::full({batch, steps}, -1, torch::kInt64);
  out.rewards = torch::zeros({batch, steps}, torch::kFloat32);
  out.terminated = torch::zeros({batch}, torch::kBool);
  out.lengths = torch::zeros({batch}, torch::kInt64);
  out.num_actions = torch::zeros({batch}, torch::kInt64);
  out.group_ids = torch::zeros({batch}, torch::kInt64);
  out.returns = torch::zeros({batch}, torch::kFloat64);
  auto ids = out.input_ids.accessor<int64_t, 2>();
  auto action = out.action_mask.accessor<bool, 2>();
  auto valid = out.valid_mask.accessor<bool, 2>();
  auto logp = out.behaviour_logprobs.accessor<float, 2>();
  auto version = out.versions.accessor<int64_t, 2>();
  auto reward = out.rewards.accessor<float, 2>();
  for (int64_t b = 0; b < batch; ++b) {
    const auto& tr = trajectories[static_cast<size_t>(b)];
    for (size_t t = 0; t < tr.size(); ++t) {
      const auto i = static_cast<int64_t>(t);
      ids[b][i] = tr.tokens[t];
      action[b][i] = tr.action_mask[t] != 0;
      valid[b][i] = true;
      logp[b][i] = tr.action_mask[t] ? tr.behaviour_logprobs[t] : 0.0f;
      version[b][i] = tr.action_mask[t] ? tr.policy_versions[t] : -1;
      reward[b][i] = tr.rewards[t];
    }
    out.terminated[b] = tr.terminated;
    out.lengths[b] = static_cast<int64_t>(tr.size());
    out.num_actions[b] = tr.num_action_tokens();
    out.group_ids[b] = tr.group_id;
    out.returns[b] = tr.total_reward();
  }
  return out;
}

}  // namespace sao::algo
