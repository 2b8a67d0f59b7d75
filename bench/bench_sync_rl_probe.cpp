// Probe: synchronous on-policy RL on arithmetic without the actor runtime
// (generate a batch, score, one learner step), to compare against actors.
#include "algo/learner.hpp"
#include "env/arithmetic.hpp"
#include "model/checkpoint.hpp"
#include "model/generation.hpp"
#include "runtime/run_config.hpp"
#include "runtime/system_info.hpp"
#include "tokenizer/byte_tokenizer.hpp"
#include "train/evaluation.hpp"

#include <cstdio>
#include <random>

int main(int argc, char** argv) {
  std::vector<std::string> overrides(argv + 2, argv + argc);
  auto config = sao::runtime::load_run_config("", overrides);
  sao::runtime::configure_threads(1);
  auto policy = sao::model::load_policy_checkpoint(argv[1]);
  sao::model::ValueModel critic(policy->config());
  sao::model::init_value_from_policy(critic, policy);
  sao::algo::Learner learner(config.learner, policy,
                             config.learner.uses_critic() ? critic : sao::model::ValueModel{nullptr});
  sao::env::ArithmeticTask task(config.task);
  sao::tokenizer::ByteTokenizer tok;
  std::mt19937_64 rng(1);
  sao::model::SamplingConfig sampling;
  sampling.max_new_tokens = 8;
  sampling.stop_tokens = {tok.eos_id()};
  for (int step = 0; step <= 80; ++step) {
    if (step % 20 == 0) {
      auto r = sao::train::evaluate_arithmetic(learner.policy(), tok, task, config.eval, 1);
      std::printf("step %d eval %.4f\n", step, r.accuracy);
    }
    std::vector<sao::env::ArithmeticProblem> problems;
    std::vector<std::vector<int64_t>> prompts;
    for (int i = 0; i < 64; ++i) {
      problems.push_back(task.sample_train(rng));
      prompts.push_back(sao::train::encode_prompt(tok, problems.back()));
    }
    auto outs = sao::model::generate(learner.policy(), prompts, sampling, step, learner.policy_version());
    std::vector<sao::algo::Trajectory> trajs;
    double reward = 0;
    for (int i = 0; i < 64; ++i) {
      bool ok = sao::env::ArithmeticTask::verify(problems[i], sao::train::answer_text(tok, outs[i].tokens), config.task.answer_format);
      reward += ok;
      trajs.push_back(sao::algo::trajectory_from_generation(prompts[i], outs[i], ok ? 1.0 : 0.0, true));
    }
    auto res = learner.step(trajs);
    if (step % 10 == 0) std::printf("step %d reward %.3f ploss %.4f ent %.3f\n", step, reward / 64, res.metrics["policy_loss"], res.metrics["entropy"]);
  }
}
