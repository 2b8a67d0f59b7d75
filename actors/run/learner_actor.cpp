// Learner actor behaviour; see learner_actor.hpp.
#include "actors/run/learner_actor.hpp"

#include "actors/console/activity_board.hpp"
#include "actors/introspection.hpp"

#include "algo/learner.hpp"
#include "algo/learner_ranks.hpp"
#include "base/error.hpp"
#include "base/host_port.hpp"
#include "gpu/device_weights.hpp"
#include "model/checkpoint.hpp"
#include "model/device.hpp"
#include "model/lora.hpp"
#include "model/tensor_blob.hpp"
#include "report/metrics_schema.hpp"
#include "train/task_runner.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>

namespace sao::actors {

struct LearnerActorState {
  LearnerActorConfig config;
  std::unique_ptr<algo::Learner> learner;
  // Every learner call that changes state goes through the leader, which
  // repeats it on the other ranks (one rank: it only forwards).
  std::unique_ptr<algo::RankLeader> leader;
  ReplayActor replay;
  WeightSyncActor weight_sync;
  MetricsActor metrics;
  CoordinatorActor coordinator;
  std::chrono::steady_clock::time_point run_start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point idle_since = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point previous_step_start = std::chrono::steady_clock::now();
  std::string state = "starting";
  double last_step_seconds = 0.0;
  std::map<std::string, double> last_metrics;
  // Held-out evaluation's environments, kept for the run: an external
  // environment's processes start once, not at every evaluation.
  train::EnvironmentPool eval_environments;
  std::string env_dead;  // set once an evaluation found the environment dead
  // A LoRA policy's first version goes whole (the weight-sync actor keeps it
  // as the base for rollouts that join later), every later one as adapters.
  bool sent_base = false;
  ActorCounters counters;
  static inline const char* name = "learner";
};

namespace {
using LearnerSelf = LearnerActor::stateful_pointer<LearnerActorState>;

double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

weights::Packet current_weights(LearnerActorState& state) {
  report::WorkTimer timer(state.counters.work[report::kWorkWeights]);
  const auto& run = state.config.run;
  const auto learner_device = model::parse_device(run.learner.device, "learner.device");
  const auto rollout_device = model::parse_device(run.rollout.device, "rollout.device");
  const int64_t version = state.learner->policy_version();
  auto& policy = *state.learner->policy();
  if (policy.config().lora.enabled() && state.sent_base) {
    // The frozen base never changes: a version is its adapters, a few MB at most.
    return weights::host_packet(version, model::pack_tensors(model::lora_tensors(policy)));
  }
  state.sent_base = true;
  if (model::has_low_precision_tensors(policy)) {
    // A LoRA base kept in bf16 (learner.lora_base_dtype) goes out once, as
    // fp32 (exact): every rollout form (fp32 copy, bf16 replica, deltas)
    // starts from an fp32 version, and its checksum is of what it holds.
    return weights::host_packet(version, model::pack_tensors(model::named_tensors_as_fp32(policy)));
  }
  if (learner_device.is_cuda() && rollout_device.is_cuda()) {
    // GPU to GPU: one device buffer per version, no host round trip; the
    // weight-sync actor chooses each rollout's route from it
    // (weights/sender.hpp).
    return weights::device_packet(
        version, std::make_shared<const model::DevicePackedTensors>(gpu::pack_for_rollouts(policy, learner_device)));
  }
  return weights::host_packet(version, model::pack_module(policy));
}

msg::ActorStatus learner_status(LearnerSelf self) {
  auto& st = self->state;
  auto status = describe_actor(self, "learner", "learner", st.state, st.counters, {});
  status.numbers[config::knob_name(config::Knob::kActorLr)] = st.learner->config().actor_lr;
  status.numbers[config::knob_name(config::Knob::kCriticLr)] = st.learner->config().critic_lr;
  status.numbers["step"] = static_cast<double>(st.learner->steps());
  status.numbers["policy_version"] = static_cast<double>(st.learner->policy_version());
  status.numbers["last_step_ms"] = st.last_step_seconds * 1e3;
  for (const char* key :
       {"policy_loss", "value_loss", "reward_mean", "entropy", "grad_norm", "explained_variance", "dis_reject_low_frac",
        "dis_reject_high_frac", "staleness_mean", "tokens_per_s", "allreduce_s", "allreduce_share"}) {
    auto it = st.last_metrics.find(key);
    if (it != st.last_metrics.end()) status.numbers[key] = it->second;
  }
  // Each rank's share of the last step and its time in collectives; the
  // introspection snapshot shows ranks 1..N-1 as entries of their own.
  const int ranks = st.learner->ranks().size();
  status.numbers["ranks"] = static_cast<double>(ranks);
  for (int r = 0; r < ranks && ranks > 1; ++r) {
    for (const char* field : {"_tokens", "_compute_s", "_allreduce_s"}) {
      const auto key = "rank" + std::to_string(r) + field;
      auto it = st.last_metrics.find(key);
      if (it != st.last_metrics.end()) status.numbers[key] = it->second;
    }
  }
  return status;
}

// Posts a long job on the activity board with the learner's status as it
// begins, so the console shows it while the learner's thread (detached) is
// in it and its mailbox waits.
ActivityScope post_activity(LearnerSelf self, const char* what) {
  return ActivityScope(self->address(),
                       {what, self->state.learner->steps(), std::chrono::steady_clock::now(), learner_status(self)});
}

msg::EvalReport evaluate(LearnerSelf self) {
  auto& state = self->state;
  state.state = "evaluating";
  const auto posted = post_activity(self, "evaluating");
  msg::EvalReport report;
  report.step = state.learner->steps();
  report.policy_version = state.learner->policy_version();
  report.accuracy = std::numeric_limits<double>::quiet_NaN();
  if (state.config.run.agent.endpoint) {
    // No built-in task: agents score held-out episodes themselves ("split":
    // "test"), which the agent actor counts (heldout_success_rate).
    self->send(state.metrics, report);
    return report;
  }
  if (!state.env_dead.empty()) {
    // A dead environment would only fail again: the final evaluation is
    // skipped (accuracy null) and the report says why.
    report.env_dead = state.env_dead;
    self->send(state.metrics, report);
    return report;
  }
  try {
    report::WorkTimer timer(state.counters.work[report::kWorkModel]);
    const auto result = train::evaluate_heldout(state.learner->policy(), state.config.run, state.learner->steps(),
                                                &state.eval_environments);
    report.accuracy = result.accuracy;
    report.total = result.total;
    report.counts = result.counts;
    report.seconds = result.seconds;
    report.errors = result.errors;
  } catch (const env::EnvironmentDead& error) {
    state.env_dead = error.what();
    state.counters.last_error = std::string("evaluation stopped: ") + error.what();
    std::fprintf(stderr, "learner: %s\n", state.counters.last_error.c_str());
    state.eval_environments.environments.clear();
    report.env_dead = state.env_dead;
    self->send(state.coordinator, report);
  } catch (const std::exception& error) {
    // An evaluation that fails (e.g. an external env is down) must not end training.
    state.counters.last_error = std::string("evaluation failed: ") + error.what();
    std::fprintf(stderr, "learner: %s\n", state.counters.last_error.c_str());
  }
  self->send(state.metrics, report);
  return report;
}

std::string save_checkpoint(LearnerSelf self) {
  auto& state = self->state;
  state.state = "checkpointing";
  const auto posted = post_activity(self, "checkpointing");
  const auto dir = model::rl_checkpoint_dir(state.config.run.run.dir);
  report::WorkTimer timer(state.counters.work[report::kWorkCheckpoint]);
  model::write_directory_atomically(dir, [&](const std::string& staging) {
    state.leader->save(model::checkpoint_learner_dir(staging));
    model::save_policy_checkpoint(
        model::checkpoint_policy_dir(staging), state.learner->policy(),
        {{"tokenizer", state.config.run.model_path.empty() ? "byte" : state.config.run.model_path},
         {"stage", "rl"},
         {"step", state.learner->steps()},
         {"policy_version", state.learner->policy_version()},
         {"run_config", state.config.run.document}});
  });
  return dir;
}

// Latency from each trajectory's completion to this step's start, in ms.
std::vector<double> completion_latencies_ms(const msg::TrainBatch& batch, std::chrono::steady_clock::time_point start) {
  const int64_t start_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(start.time_since_epoch()).count();
  std::vector<double> latencies;
  for (const auto& trajectory : batch.trajectories) {
    latencies.push_back(static_cast<double>(start_ns - trajectory.origin.finished_at_ns) / 1e6);
  }
  return latencies;
}

// The drift regime of the most recently finished episode, so metrics.jsonl
// marks where the environment switched (NaN for environments without one).
double latest_regime(const msg::TrainBatch& batch) {
  double regime = std::numeric_limits<double>::quiet_NaN();
  int64_t latest = std::numeric_limits<int64_t>::min();
  for (const auto& trajectory : batch.trajectories) {
    if (std::isnan(trajectory.origin.regime_index)) continue;
    if (trajectory.origin.finished_at_ns >= latest) {
      latest = trajectory.origin.finished_at_ns;
      regime = trajectory.origin.regime_index;
    }
  }
  return regime;
}

void run_step(LearnerSelf self, msg::TrainBatch& batch) {
  auto& state = self->state;
  const auto start = std::chrono::steady_clock::now();
  const double idle_ms = seconds_between(state.idle_since, start) * 1e3;
  const double since_previous = seconds_between(state.previous_step_start, start);
  state.previous_step_start = start;
  state.state = "training";
  const auto& trajectories = batch.trajectories;
  const auto latencies = completion_latencies_ms(batch, start);
  const double regime = latest_regime(batch);
  algo::StepResult result;
  try {
    const auto posted = post_activity(self, "training");
    report::WorkTimer timer(state.counters.work[report::kWorkModel]);
    result = state.leader->step(trajectories);
  } catch (const algo::RankFailure& error) {
    // The group is broken: no rank can take another step. The run ends
    // without a final checkpoint (this step may be half taken); --resume
    // continues from the last one, with the ranks that are left.
    state.counters.last_error = error.what();
    std::fprintf(stderr, "learner: step %lld: %s\n", static_cast<long long>(state.learner->steps()), error.what());
    self->quit(msg::make_error(msg::Errc::kRefused, error.what()));
    return;
  } catch (const std::exception& error) {
    // A malformed batch must not kill the run: count it and go on. The
    // reason goes to stderr once per distinct message (metrics hold numbers).
    if (state.counters.last_error != error.what()) {
      std::fprintf(stderr, "learner: step %lld: batch rejected: %s\n", static_cast<long long>(state.learner->steps()),
                   error.what());
    }
    state.counters.last_error = error.what();
    result.metrics["batch_rejected"] = 1.0;
  }
  state.last_step_seconds = seconds_between(start, std::chrono::steady_clock::now());
  auto& metrics = result.metrics;
  metrics["step"] = static_cast<double>(state.learner->steps());
  metrics["policy_version"] = static_cast<double>(state.learner->policy_version());
  metrics["wall_time_s"] = seconds_between(state.run_start, std::chrono::steady_clock::now());
  metrics["trajectories"] = static_cast<double>(trajectories.size());
  metrics["dropped_stale"] = static_cast<double>(batch.dropped_stale);
  metrics["learner_idle_ms"] = idle_ms;
  metrics["learner_step_ms"] = state.last_step_seconds * 1e3;
  // Live knobs, so a console `set` shows in metrics.jsonl from the next step
  // on (the replay knobs are added by the metrics sink).
  metrics["actor_lr"] = state.learner->config().actor_lr;
  metrics["critic_lr"] = state.learner->config().critic_lr;
  metrics["queued_after"] = static_cast<double>(batch.queued_after);
  if (!std::isnan(regime)) metrics["env_regime"] = regime;
  double latency_sum = 0.0;
  double latency_max = 0.0;
  for (double latency : latencies) {
    latency_sum += latency;
    latency_max = std::max(latency_max, latency);
  }
  metrics["rollout_to_learner_ms"] = latencies.empty() ? 0.0 : latency_sum / static_cast<double>(latencies.size());
  metrics["rollout_to_learner_ms_max"] = latency_max;
  metrics["tokens_per_s"] = since_previous > 0 ? metrics["tokens"] / since_previous : 0.0;
  for (const char* key : report::kStepMetricKeys) metrics.emplace(key, std::numeric_limits<double>::quiet_NaN());
  if (result.policy_updated) self->send(state.weight_sync, current_weights(state));
  state.last_metrics = metrics;
  msg::StepReport report{state.learner->steps(), state.learner->policy_version(), result.policy_updated, metrics,
                         latencies};
  // The coordinator needs only whether the policy changed: in sync mode a
  // step without new weights (critic warm-up, a skipped step) must release
  // the next round itself, since no weights will.
  self->send(state.coordinator, msg::StepReport{report.step, report.policy_version, report.policy_updated, {}, {}});
  self->send(state.metrics, std::move(report));
  const auto& train = state.config.run.train;
  const int64_t step = state.learner->steps();
  if (train.eval_every > 0 && step % train.eval_every == 0 && step < train.steps) evaluate(self);
  if (train.checkpoint_every > 0 && step % train.checkpoint_every == 0 && step < train.steps) save_checkpoint(self);
  state.state = "idle";
  state.idle_since = std::chrono::steady_clock::now();
  // At the budget the coordinator takes over (final eval + checkpoint); no more batches.
  if (step < train.steps) self->send(state.replay, atoms::learner_idle_atom_v, state.learner->policy_version());
}
}  // namespace

LearnerActor::behavior_type learner_behavior(LearnerSelf self, LearnerActorConfig config) {
  auto& state = self->state;
  state.config = std::move(config);
  const auto& run = state.config.run;
  // run_training checked that the device exists before spawning anything.
  const auto device = model::parse_device(run.learner.device, "learner.device");
  state.config.policy->to(device);
  model::ValueModel critic{nullptr};
  if (run.learner.uses_critic()) {
    critic = model::ValueModel(state.config.policy->config());
    critic->to(device);
    model::init_value_from_policy(critic, state.config.policy);
  }
  state.learner = std::make_unique<algo::Learner>(run.learner, state.config.policy, critic, state.config.ranks);
  state.leader = std::make_unique<algo::RankLeader>(*state.learner);
  if (!state.config.resume_from.empty()) state.learner->load(state.config.resume_from);
  state.leader->share_state();
  return counted_behavior<LearnerActor::behavior_type>(
      self,
      [self](atoms::start_atom, const ReplayActor& replay, const WeightSyncActor& weight_sync,
             const MetricsActor& metrics, const CoordinatorActor& coordinator) {
        auto& st = self->state;
        st.coordinator = coordinator;
        st.replay = replay;
        st.weight_sync = weight_sync;
        st.metrics = metrics;
        evaluate(self);  // the "before" number of the run
        self->send(st.weight_sync, current_weights(st));
        st.state = "idle";
        st.idle_since = std::chrono::steady_clock::now();
        st.previous_step_start = st.idle_since;
        self->send(st.replay, atoms::learner_idle_atom_v, st.learner->policy_version());
      },
      [self](msg::TrainBatch& batch) { run_step(self, batch); },
      [self](atoms::checkpoint_atom) -> caf::result<std::string> {
        try {
          auto dir = save_checkpoint(self);
          self->state.state = "idle";
          return dir;
        } catch (const std::exception& error) {
          // A failed save keeps the previous checkpoint (written atomically) and the run.
          self->state.counters.last_error = std::string("checkpoint failed: ") + error.what();
          self->state.state = "idle";
          return msg::make_error(msg::Errc::kCheckpointFailed, self->state.counters.last_error);
        }
      },
      [self](const msg::SetKnob& change) -> caf::result<std::string> {
        std::string key;
        try {
          // A peer's knob number is checked before its name is used.
          if (!config::knob_from_value(static_cast<uint8_t>(change.knob))) throw Error("set: unknown live knob");
          key = config::knob_name(change.knob);
          if (change.knob == config::Knob::kActorLr) {
            self->state.leader->set_actor_lr(change.value);
          } else if (change.knob == config::Knob::kCriticLr) {
            self->state.leader->set_critic_lr(change.value);
          } else {
            throw Error("set " + key + ": not a learner knob");
          }
        } catch (const Error& error) {
          self->state.counters.last_error = error.what();
          return msg::make_error(msg::Errc::kRefused, error.what());
        }
        return "learner." + key + " applied";
      },
      [self](atoms::final_eval_atom) {
        auto report = evaluate(self);
        save_checkpoint(self);
        try {
          self->state.leader->stop();
        } catch (const std::exception& error) {
          // The other ranks are gone already; the checkpoint above is rank 0's alone anyway.
          std::fprintf(stderr, "learner: stopping the other ranks: %s\n", error.what());
        }
        self->state.state = "stopped";
        return report;
      },
      [self](atoms::status_atom) { return learner_status(self); });
}

std::shared_ptr<algo::RankGroup> join_learner_ranks(const config::RunConfig& run, const model::ModelConfig& model) {
  const auto& learner = run.learner;
  if (learner.ranks <= 1) return nullptr;
  const auto address = base::parse_host_port(learner.rank_address, "learner.rank_address");
  algo::RankGroupOptions options;
  options.host = address.host;
  options.port = address.port;
  options.rank = 0;
  options.size = static_cast<int>(learner.ranks);
  options.timeout = std::chrono::seconds(learner.rank_timeout_s);
  options.on_listening = [&](uint16_t port) {
    std::fprintf(stderr,
                 "learner: rank 0 of %lld waits up to %lld s for ranks 1..%lld at %s:%u "
                 "(sao node --role learner-rank --rank-address %s:%u --rank R --ranks %lld)\n",
                 static_cast<long long>(learner.ranks), static_cast<long long>(learner.rank_timeout_s),
                 static_cast<long long>(learner.ranks - 1), address.host.c_str(), port, address.host.c_str(), port,
                 static_cast<long long>(learner.ranks));
  };
  auto group = algo::join_gloo_group(options);
  algo::send_rank_setup(*group,
                        {{"model", model::model_config_settings_to_json(model)}, {"learner", learner.to_json()}});
  return group;
}

LearnerActor spawn_learner_actor(caf::actor_system& system, LearnerActorConfig config) {
  return system.spawn<caf::detached>(learner_behavior, std::move(config));
}

}  // namespace sao::actors
