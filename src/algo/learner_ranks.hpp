// The step protocol between learner ranks. Rank 0 (the run's learner actor)
// leads: every command it gives (a step's trajectories, new learning rates,
// a state share, stop) is broadcast through the rank group, and ranks
// 1..N-1 (`sao node --role learner-rank`) follow the same sequence, so every
// rank runs the same Learner calls in the same order. Why over the c10d
// group and not CAF: the followers need nothing but the group (no actor
// system, no cluster membership), and the bytes ride the same transport as
// the gradients.
#pragma once

#include "algo/learner.hpp"
#include "algo/rank_group.hpp"
#include "algo/trajectory.hpp"
#include "model/model_config.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace sao::algo {

// What a follower needs to build its learner before the first command: the
// model's settings (model_config_settings_to_json) and the learner config
// (LearnerConfig::to_json). Rank 0 sends, the others receive.
void send_rank_setup(RankGroup& group, const nlohmann::json& setup);
nlohmann::json receive_rank_setup(RankGroup& group);
// The setup checked and read: throws sao::Error naming the key.
struct RankSetup {
  model::ModelConfig model;
  LearnerConfig learner;
};
RankSetup read_rank_setup(const nlohmann::json& setup);

// Rank 0's side. Wraps the learner: every call is broadcast, then run here.
class RankLeader {
 public:
  explicit RankLeader(Learner& learner);
  // Ships the trajectories, runs the step on every rank, and every
  // learner.rank_check_every steps checks that the ranks still agree
  // (Learner::check_ranks_agree). Errors as Learner::step; a RankFailure
  // means the group is broken and the run must stop.
  StepResult step(const std::vector<Trajectory>& trajectories);
  void set_actor_lr(double lr);
  void set_critic_lr(double lr);
  // After load() (or any change made on rank 0 alone): every rank takes rank
  // 0's weights, optimiser state and counters.
  void share_state();
  // Writes the learner checkpoint (Learner::save) with every rank's part.
  void save(const std::string& dir);
  // The followers return from follow_leader. Idempotent.
  void stop();
  Learner& learner() { return learner_; }

 private:
  void command(int64_t kind, const std::vector<uint8_t>& payload = {}, double value = 0.0);
  Learner& learner_;
  bool stopped_ = false;
};

// Ranks 1..N-1: receives rank 0's commands and runs them on `learner` until
// stop. Returns the number of steps run. Throws RankFailure when the group
// breaks (rank 0 died or the ranks diverged).
int64_t follow_leader(Learner& learner);

// A follower process (`sao node --role learner-rank`): joins the group,
// receives rank 0's setup, builds the policy (and critic) from it on
// `device` ("" = the leader's learner.device) and follows until rank 0 says
// stop. Returns the steps run; throws RankFailure when the group breaks and
// sao::Error for a setup it cannot build.
int64_t serve_learner_rank(const RankGroupOptions& options, const std::string& device = "");

// The trajectories as bytes and back, for the step command. decode checks
// every count against the bytes left and names what is wrong.
std::vector<uint8_t> encode_trajectories(const std::vector<Trajectory>& trajectories);
std::vector<Trajectory> decode_trajectories(const std::vector<uint8_t>& bytes);

}  // namespace sao::algo
