// The public keys of a metrics.jsonl step line (README "metrics.jsonl"), in
// one place: the learner actor fills every one of them on every step (null
// when undefined for that step or algorithm). tests/test_slow_actor_train.cpp
// keeps its own copy on purpose: it holds the public interface against this
// list.
#pragma once

namespace sao::report {

inline constexpr const char* kStepMetricKeys[] = {"step",
                                                  "policy_version",
                                                  "wall_time_s",
                                                  "trajectories",
                                                  "tokens",
                                                  "reward_mean",
                                                  "batch_accuracy",
                                                  "policy_loss",
                                                  "value_loss",
                                                  "explained_variance",
                                                  "entropy",
                                                  "dis_reject_low_frac",
                                                  "dis_reject_high_frac",
                                                  "ratio_mean",
                                                  "ratio_max",
                                                  "staleness_mean",
                                                  "staleness_max",
                                                  "dropped_stale",
                                                  "grad_norm",
                                                  "learner_idle_ms",
                                                  "rollout_to_learner_ms",
                                                  "tokens_per_s"};

}  // namespace sao::report
