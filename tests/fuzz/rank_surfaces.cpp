// What a learner rank reads from rank 0 over c10d: the step message (the
// batch's trajectories as bytes, decoded and stepped by a one-rank
// learner) and the setup (the model's settings and the learner config, from
// which a follower builds its models). c10d authenticates nobody, so both
// are untrusted bytes.
#include "algo/learner.hpp"
#include "algo/learner_ranks.hpp"
#include "base/json_parse.hpp"
#include "fuzz_harness.hpp"
#include "model/model_config.hpp"
#include "model/transformer.hpp"

namespace sao_fuzz {

namespace {

std::vector<sao::algo::Trajectory> seed_batch() {
  std::vector<sao::algo::Trajectory> batch;
  for (int i = 0; i < 3; ++i) {
    sao::algo::Turn turn;
    turn.action_tokens = {5, 6, static_cast<int64_t>(7 + i)};
    turn.logprobs = {-1.0f, -0.5f, -2.0f};
    turn.versions = {0, 0, 0};
    batch.push_back(sao::algo::make_trajectory({1, 2}, {turn}, i % 2, i != 1, i));
  }
  return batch;
}

}  // namespace

Surface rank_step_surface() {
  Surface surface;
  surface.name = "rank_step";
  const auto bytes = sao::algo::encode_trajectories(seed_batch());
  surface.seeds = {std::string(bytes.begin(), bytes.end())};
  surface.run = [](const std::string& input, const fs::path&) {
    const auto trajectories = sao::algo::decode_trajectories(std::vector<uint8_t>(input.begin(), input.end()));
    sao::model::CausalLM policy(tiny());
    sao::model::init_weights(*policy, 1);
    sao::model::ValueModel critic(tiny());
    sao::model::init_value_from_policy(critic, policy);
    sao::algo::LearnerConfig config;
    config.critic_warmup_steps = 0;
    sao::algo::Learner learner(config, policy, critic);
    learner.step(trajectories);
    return Outcome::kAccepted;
  };
  return surface;
}

Surface rank_setup_surface() {
  Surface surface;
  surface.name = "rank_setup";
  const nlohmann::json setup = {{"model", sao::model::model_config_settings_to_json(tiny())},
                                {"learner", sao::algo::LearnerConfig{}.to_json()}};
  surface.seeds = {setup.dump()};
  surface.run = [](const std::string& input, const fs::path&) {
    const auto parsed = sao::algo::read_rank_setup(sao::base::parse_json_limited(input, "fuzz: rank setup"));
    // What a follower builds from it (a small model: the seed's shape or a mutation of it).
    sao::model::CausalLM policy(parsed.model);
    return Outcome::kAccepted;
  };
  return surface;
}

}  // namespace sao_fuzz
