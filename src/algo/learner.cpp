// The learner step; see learner.hpp for the sequence and its guarantees.
#include "algo/learner.hpp"

#include "algo/adamw_state.hpp"
#include "model/device.hpp"
#include "model/lora.hpp"

#include "base/atomic_file.hpp"
#include "base/error.hpp"
#include "base/json_parse.hpp"
#include "base/json_reader.hpp"
#include "model/regular_file.hpp"
#include "model/safetensors.hpp"

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>

namespace sao::algo {

namespace fs = std::filesystem;

PolicyOutputs policy_outputs(model::CausalLM& policy, const torch::Tensor& input_ids) {
  const int64_t batch = input_ids.size(0), steps = input_ids.size(1);
  auto logits = policy->forward(input_ids);                                                     // [B, T, V]
  auto log_probs = torch::log_softmax(logits.narrow(1, 0, steps - 1).to(torch::kFloat32), -1);  // [B, T-1, V]
  auto next_tokens = input_ids.narrow(1, 1, steps - 1).unsqueeze(-1);                           // [B, T-1, 1]
  auto token_logprobs = log_probs.gather(2, next_tokens).squeeze(-1);                           // [B, T-1]
  auto first = torch::zeros({batch, 1}, token_logprobs.options());
  PolicyOutputs out;
  out.logprobs = torch::cat({first, token_logprobs}, 1);  // [B, T]
  auto detached = log_probs.detach();
  auto entropy = -(detached.exp() * detached).sum(-1);  // [B, T-1]
  out.entropy = torch::cat({first.detach(), entropy}, 1);
  return out;
}

CriticOutputs critic_outputs(model::ValueModel& critic, const torch::Tensor& input_ids, const torch::Tensor& lengths) {
  const int64_t batch = input_ids.size(0), steps = input_ids.size(1);
  auto out = critic->forward(input_ids).to(torch::kFloat32);  // [B, T]: V of the state ending at t
  CriticOutputs result;
  result.values = torch::cat({torch::zeros({batch, 1}, out.options()), out.narrow(1, 0, steps - 1)}, 1);
  auto last = (lengths.to(out.device()) - 1).unsqueeze(1);  // [B, 1]
  result.bootstrap = out.gather(1, last).squeeze(1);        // [B]
  return result;
}

namespace {
// True when the buckets are the whole batch at its full width: the plain path.
bool one_full_bucket(const std::vector<LengthBucket>& buckets, const torch::Tensor& input_ids) {
  return buckets.size() <= 1 && (buckets.empty() || buckets.front().width == input_ids.size(1));
}

// Rows of `bucket`, as an index tensor on `device`.
torch::Tensor bucket_rows(const LengthBucket& bucket, const torch::Device& device) {
  return torch::tensor(bucket.rows, torch::kInt64).to(device);
}

// Batch order from bucket order: entry r is row r's position in the
// concatenation of the buckets.
torch::Tensor inverse_order(const std::vector<LengthBucket>& buckets, int64_t rows, const torch::Device& device) {
  std::vector<int64_t> position(static_cast<size_t>(rows), -1);
  int64_t next = 0;
  for (const auto& bucket : buckets) {
    for (const auto row : bucket.rows) position[static_cast<size_t>(row)] = next++;
  }
  if (next != rows || std::count(position.begin(), position.end(), -1) != 0) {
    throw Error("learner: length buckets hold " + std::to_string(next) + " rows for a batch of " +
                std::to_string(rows));
  }
  return torch::tensor(position, torch::kInt64).to(device);
}

// [rows, width] -> [rows, steps], zeros on the right.
torch::Tensor pad_right(const torch::Tensor& x, int64_t steps) {
  return x.size(1) == steps ? x : torch::constant_pad_nd(x, {0, steps - x.size(1)}, 0.0);
}
}  // namespace

PolicyOutputs policy_outputs(model::CausalLM& policy, const torch::Tensor& input_ids,
                             const std::vector<LengthBucket>& buckets) {
  if (one_full_bucket(buckets, input_ids)) return policy_outputs(policy, input_ids);
  const int64_t steps = input_ids.size(1);
  std::vector<torch::Tensor> logprobs, entropy;
  for (const auto& bucket : buckets) {
    const auto ids = input_ids.index_select(0, bucket_rows(bucket, input_ids.device())).narrow(1, 0, bucket.width);
    const auto out = policy_outputs(policy, ids);
    logprobs.push_back(pad_right(out.logprobs, steps));
    entropy.push_back(pad_right(out.entropy, steps));
  }
  const auto order = inverse_order(buckets, input_ids.size(0), input_ids.device());
  return {torch::cat(logprobs, 0).index_select(0, order), torch::cat(entropy, 0).index_select(0, order)};
}

CriticOutputs critic_outputs(model::ValueModel& critic, const torch::Tensor& input_ids, const torch::Tensor& lengths,
                             const std::vector<LengthBucket>& buckets) {
  if (one_full_bucket(buckets, input_ids)) return critic_outputs(critic, input_ids, lengths);
  const int64_t steps = input_ids.size(1);
  std::vector<torch::Tensor> values, bootstrap;
  for (const auto& bucket : buckets) {
    const auto rows = bucket_rows(bucket, input_ids.device());
    const auto ids = input_ids.index_select(0, rows).narrow(1, 0, bucket.width);
    const auto out = critic_outputs(critic, ids, lengths.index_select(0, rows.to(lengths.device())));
    values.push_back(pad_right(out.values, steps));
    bootstrap.push_back(out.bootstrap);
  }
  const auto order = inverse_order(buckets, input_ids.size(0), input_ids.device());
  return {torch::cat(values, 0).index_select(0, order), torch::cat(bootstrap, 0).index_select(0, order)};
}

int64_t freeze_attention(torch::nn::Module& critic) {
  return model::set_group_trainable(critic, model::ParamGroup::kAttention, false);
}

namespace {

std::vector<torch::Tensor> trainable(const std::vector<torch::Tensor>& parameters) {
  std::vector<torch::Tensor> out;
  for (const auto& p : parameters) {
    if (p.requires_grad()) out.push_back(p);
  }
  return out;
}

std::unique_ptr<ShardedAdamW> make_adamw(const std::vector<torch::Tensor>& params, double lr, const LearnerConfig& c,
                                         const std::shared_ptr<RankGroup>& ranks) {
  auto options = torch::optim::AdamWOptions(lr)
                     .betas(std::make_tuple(c.adam_beta1, c.adam_beta2))
                     .eps(c.adam_eps)
                     .weight_decay(c.weight_decay);
  return std::make_unique<ShardedAdamW>(params, options, ranks, c.shard_optimizer);
}

// Total L2 norm of the gradients (before clipping); scales them down to
// max_norm when it is exceeded (max_norm 0: no clipping). Non-finite norms
// are returned untouched for the caller to skip on.
double clip_gradients(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> norms;
  for (const auto& p : params) {
    if (p.grad().defined()) norms.push_back(p.grad().detach().to(torch::kFloat64).norm());
  }
  if (norms.empty()) return 0.0;
  const double total = torch::stack(norms).norm().item<double>();
  if (std::isfinite(total) && max_norm > 0 && total > max_norm) {
    const double scale = max_norm / (total + 1e-6);
    for (const auto& p : params) {
      if (p.grad().defined()) p.grad().mul_(scale);
    }
  }
  return total;
}

void check_no_shared_storage(const torch::nn::Module& policy, const torch::nn::Module& critic) {
  std::set<const void*> policy_storage;
  for (const auto& p : policy.parameters()) policy_storage.insert(p.storage().data());
  for (const auto& item : critic.named_parameters()) {
    if (policy_storage.count(item.value().storage().data())) {
      throw Error("learner: critic parameter '" + item.key() +
                  "' shares storage with the policy; SAO needs separate weights (use init_value_from_policy)");
    }
  }
}

TrajectoryBatch batch_to(TrajectoryBatch batch, const torch::Device& device) {
  for (auto* t : {&batch.input_ids, &batch.action_mask, &batch.valid_mask, &batch.behaviour_logprobs, &batch.versions,
                  &batch.rewards, &batch.terminated, &batch.lengths}) {
    *t = t->to(device);
  }
  return batch;
}

bool inputs_finite(const TrajectoryBatch& batch) {
  auto behaviour = batch.behaviour_logprobs.masked_select(batch.action_mask);
  return torch::isfinite(batch.rewards).all().item<bool>() && torch::isfinite(behaviour).all().item<bool>();
}

// reward_mean, accuracy, token counts and staleness of a collated batch.
void batch_metrics(const std::vector<Trajectory>& kept, const TrajectoryBatch& batch, int64_t learner_version,
                   Metrics& m) {
  m["trajectories"] = static_cast<double>(kept.size());
  m["reward_mean"] = batch.returns.mean().item<double>();
  double accuracy_sum = 0.0;
  int64_t accuracy_count = 0;
  for (const auto& tr : kept) {
    if (std::isnan(tr.accuracy)) continue;
    accuracy_sum += tr.accuracy;
    ++accuracy_count;
  }
  if (accuracy_count > 0) m["batch_accuracy"] = accuracy_sum / static_cast<double>(accuracy_count);
  m["tokens"] = static_cast<double>(batch.valid_mask.sum().item<int64_t>());
  m["action_tokens"] = static_cast<double>(batch.action_mask.sum().item<int64_t>());
  auto staleness = (learner_version - batch.versions.masked_select(batch.action_mask)).to(torch::kFloat64);
  m["staleness_mean"] = staleness.mean().item<double>();
  m["staleness_max"] = staleness.max().item<double>();
  auto count = [&](double lo, double hi) { return ((staleness >= lo) & (staleness < hi)).sum().item<int64_t>(); };
  m["staleness_hist_0"] = static_cast<double>(count(0, 1));
  m["staleness_hist_1"] = static_cast<double>(count(1, 2));
  m["staleness_hist_2_3"] = static_cast<double>(count(2, 4));
  m["staleness_hist_4_7"] = static_cast<double>(count(4, 8));
  m["staleness_hist_8_plus"] = static_cast<double>(count(8, INFINITY));
}

PolicyLossResult compute_policy_loss(const LearnerConfig& c, const torch::Tensor& logprobs,
                                     const TrajectoryBatch& batch, const torch::Tensor& advantages,
                                     int64_t batch_tokens) {
  return c.policy_loss == PolicyLossKind::kDis
             ? dis_loss(logprobs, batch.behaviour_logprobs, advantages, batch.action_mask, c.dis, batch_tokens)
             : ppo_clip_loss(logprobs, batch.behaviour_logprobs, advantages, batch.action_mask, c.ppo, batch_tokens);
}

// What the actor stage adds up over its pieces and ranks before reporting:
// sums (index by the enum) and maxima.
enum ActorSum { kEntropy, kActions, kLoss, kBelow, kAbove, kDual, kRatio, kLag0, kLag0Outside, kActorSums };
enum ActorMax { kRatioMax, kLag0GapMax, kActorMaxes };

// Rollout against learner log-probs on the action tokens sampled by the
// weights the learner holds now (lag 0): the same weights produced both, so
// they may differ only by numerics (KV cache, batching, kernels, precision).
// A gap here is a bug in recording or recomputing log-probs, which DIS would
// otherwise silently treat as off-policy drift. `logprobs` is this step's
// forward pass; nothing is recomputed. Adds this piece's lag-0 count, the
// count outside DIS's band, and the largest gap.
void add_logprob_agreement(const torch::Tensor& logprobs, const TrajectoryBatch& batch, int64_t learner_version,
                           const DisOptions& band, std::vector<double>& sums, std::vector<double>& maxes) {
  torch::NoGradGuard no_grad;
  const auto lag0 = batch.action_mask & (batch.versions == learner_version);
  const int64_t tokens = lag0.sum().item<int64_t>();
  sums[kLag0] += static_cast<double>(tokens);
  if (tokens == 0) return;
  const auto learner = logprobs.detach().masked_select(lag0);
  const auto rollout = batch.behaviour_logprobs.masked_select(lag0).to(learner.scalar_type());
  maxes[kLag0GapMax] = std::max(maxes[kLag0GapMax],
                                (rollout.to(torch::kFloat64) - learner.to(torch::kFloat64)).abs().max().item<double>());
  // The ratio as dis_loss computes it (same dtype), so the count matches its rejections.
  const auto outside = dis_outside_band((learner - rollout).exp(), band);
  sums[kLag0Outside] += static_cast<double>((outside.below | outside.above).sum().item<int64_t>());
}

// The piece's rows of the share (the share itself when the piece is all of it).
TrajectoryBatch piece_batch(const TrajectoryBatch& share, const StepPiece& piece) {
  return static_cast<int64_t>(piece.rows.size()) == share.batch_size() ? share : select_rows(share, piece.rows);
}
torch::Tensor piece_rows(const torch::Tensor& x, const TrajectoryBatch& share, const StepPiece& piece) {
  return static_cast<int64_t>(piece.rows.size()) == share.batch_size()
             ? x
             : x.index_select(0, row_index(piece.rows, x.device()));
}

// Mean and population std of x over the mask's tokens of every rank (two
// passes, as torch's var: the mean first, then squared deviations from it).
struct Moments {
  double mean = 0.0;
  double std = 0.0;
  double count = 0.0;
};
Moments moments_over_ranks(RankGroup& ranks, const torch::Tensor& x, const torch::Tensor& mask) {
  const auto selected = x.detach().masked_select(mask.to(torch::kBool)).to(torch::kFloat64);
  const auto first =
      reduce_numbers(ranks, {static_cast<double>(selected.numel()), selected.sum().item<double>()}, ReduceOp::kSum);
  Moments out;
  out.count = first[0];
  if (out.count == 0) return out;
  out.mean = first[1] / out.count;
  const double squares = reduce_numbers(ranks, {(selected - out.mean).pow(2).sum().item<double>()}, ReduceOp::kSum)[0];
  out.std = std::sqrt(squares / out.count);
  return out;
}

constexpr const char* kStateFormat = "sao-learner-state-v1";

}  // namespace

Learner::Learner(LearnerConfig config, model::CausalLM policy, model::ValueModel critic,
                 std::shared_ptr<RankGroup> ranks)
    : config_(config),
      policy_(std::move(policy)),
      critic_(std::move(critic)),
      ranks_(ranks ? std::move(ranks) : single_rank()),
      device_(torch::kCPU),
      running_baseline_(static_cast<size_t>(config_.running_mean_window)) {
  config_.validate("learner config");
  if (policy_.is_empty()) throw Error("learner: no policy given");
  if (config_.uses_critic() && critic_.is_empty()) throw Error("learner: baseline 'critic' needs a value model");
  if (!config_.uses_critic() && !critic_.is_empty()) {
    throw Error(std::string("learner: a value model was given but baseline is '") + baseline_name(config_.baseline) +
                "'; it would never be trained");
  }
  device_ = policy_->parameters().front().device();
  if (policy_->config().lora.enabled() && config_.lora_base_bf16()) {
    // The base never trains: 2 bytes a parameter instead of 4.
    model::store_frozen_base_as(policy_, torch::kBFloat16);
  }
  policy_->model->set_activation_checkpointing(config_.activation_checkpointing);
  if (!critic_.is_empty()) critic_->model->set_activation_checkpointing(config_.activation_checkpointing);
  actor_params_ = trainable(policy_->parameters());
  if (actor_params_.empty()) throw Error("learner: the policy has no trainable parameter");
  actor_optimizer_ = make_adamw(actor_params_, config_.actor_lr, config_, ranks_);
  if (!config_.uses_critic()) return;
  check_no_shared_storage(*policy_, *critic_);
  if (critic_->parameters().front().device() != device_) throw Error("learner: policy and critic on different devices");
  model::set_group_trainable(*critic_, model::ParamGroup::kAttention, !config_.freeze_critic_attention);
  critic_params_ = trainable(critic_->parameters());
  critic_optimizer_ = make_adamw(critic_params_, config_.critic_lr, config_, ranks_);
}

void Learner::set_actor_lr(double lr) {
  if (!(lr > 0.0) || !std::isfinite(lr)) throw Error("learner: actor_lr must be a positive number");
  config_.actor_lr = lr;
  actor_optimizer_->set_lr(lr);
}

void Learner::set_critic_lr(double lr) {
  if (!critic_optimizer_) throw Error("learner: critic_lr: this learner has no critic (baseline is not 'critic')");
  if (!(lr > 0.0) || !std::isfinite(lr)) throw Error("learner: critic_lr must be a positive number");
  config_.critic_lr = lr;
  critic_optimizer_->set_lr(lr);
}

void Learner::check_admissible(const std::vector<Trajectory>& trajectories) const {
  const int64_t vocabulary = policy_->config().vocab_size;
  for (size_t i = 0; i < trajectories.size(); ++i) {
    const auto& tr = trajectories[i];
    const std::string where = "trajectory " + std::to_string(i);
    tr.validate(where);
    for (size_t t = 0; t < tr.size(); ++t) {
      // A peer's or an environment's token the embedding cannot look up.
      if (tr.tokens[t] >= vocabulary) {  // negative ids: validate() above
        throw Error(where + ": token at position " + std::to_string(t) + " is " + std::to_string(tr.tokens[t]) +
                    ", outside the model's vocabulary of " + std::to_string(vocabulary));
      }
      if (tr.action_mask[t] && tr.policy_versions[t] > policy_version_) {
        throw Error(where + ": action token at position " + std::to_string(t) + " comes from policy version " +
                    std::to_string(tr.policy_versions[t]) + ", newer than the learner's " +
                    std::to_string(policy_version_));
      }
    }
  }
}

void Learner::record_skip(StepResult& result) {
  result.skipped_nonfinite = true;
  ++skipped_nonfinite_;
}

StepResult Learner::step(const std::vector<Trajectory>& trajectories) {
  const auto start = std::chrono::steady_clock::now();
  const double collective_before = ranks_->collective_seconds();
  StepResult result;
  check_admissible(trajectories);
  if (!trajectories.empty()) train(trajectories, result);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Metrics& m = result.metrics;
  if (ranks_->size() > 1 && !trajectories.empty()) {
    // Each rank's share and where its time went, gathered once a step.
    const double collective = ranks_->collective_seconds() - collective_before;
    const auto size = static_cast<size_t>(ranks_->size());
    std::vector<double> slots(3 * size, 0.0);
    const auto rank = static_cast<size_t>(ranks_->rank());
    slots[3 * rank] = static_cast<double>(plan_.share_tokens);
    slots[3 * rank + 1] = seconds - collective;
    slots[3 * rank + 2] = collective;
    slots = reduce_numbers(*ranks_, slots, ReduceOp::kSum);
    for (size_t r = 0; r < size; ++r) {
      const std::string prefix = "rank" + std::to_string(r) + "_";
      m[prefix + "tokens"] = slots[3 * r];
      m[prefix + "compute_s"] = slots[3 * r + 1];
      m[prefix + "allreduce_s"] = slots[3 * r + 2];
    }
    m["allreduce_s"] = collective;
    m["allreduce_share"] = seconds > 0 ? collective / seconds : 0.0;
  }
  m["critic_updates"] = static_cast<double>(result.critic_updates);
  m["policy_updated"] = result.policy_updated ? 1.0 : 0.0;
  m["step_skipped"] = result.skipped_nonfinite ? 1.0 : 0.0;
  m["skipped_nonfinite"] = static_cast<double>(skipped_nonfinite_);
  m["policy_version"] = static_cast<double>(policy_version_);
  m["learner_step"] = static_cast<double>(steps_);
  m["step_seconds"] = seconds;
  if (m.count("tokens") && seconds > 0) m["learner_tokens_per_s"] = m["tokens"] / seconds;
  return result;
}

void Learner::train(const std::vector<Trajectory>& kept, StepResult& result) {
  const model::AutocastGuard autocast(device_, config_.bf16_autocast);
  Metrics& m = result.metrics;
  const auto whole = batch_to(collate(kept, config_.pad_id), device_);
  batch_metrics(kept, whole, policy_version_, m);
  {
    const auto lengths = whole.lengths.to(torch::kCPU, torch::kInt64).contiguous();
    plan_ = plan_step(std::vector<int64_t>(lengths.data_ptr<int64_t>(), lengths.data_ptr<int64_t>() + lengths.numel()),
                      ranks_->rank(), ranks_->size(), config_.micro_batch_tokens, config_.max_length_buckets);
    int64_t passes = 0;
    for (const auto& piece : plan_.pieces) passes += static_cast<int64_t>(piece.buckets.size());
    m["length_buckets"] = static_cast<double>(passes);
    m["micro_batches"] = static_cast<double>(plan_.pieces.size());
  }
  batch_action_tokens_ = whole.action_mask.sum().item<int64_t>();
  const auto share = ranks_->size() == 1 ? whole : select_rows(whole, plan_.share);
  const bool warmup = config_.uses_critic() && steps_ < config_.critic_warmup_steps;
  m["critic_only"] = warmup ? 1.0 : 0.0;
  ++steps_;
  if (!inputs_finite(whole)) return record_skip(result);
  auto advantages = config_.uses_critic()
                        ? critic_stage(share, result)
                        : piece_rows(baseline_advantages(whole, m), whole, StepPiece{plan_.share, {}, 0});
  if (result.skipped_nonfinite) return;
  if (config_.normalize_advantages) {
    const auto moments = moments_over_ranks(*ranks_, advantages, share.action_mask);
    advantages = normalize_advantages(advantages, share.action_mask, moments.mean, moments.std);
  }
  result.advantages = advantages;
  const auto moments = moments_over_ranks(*ranks_, advantages, share.action_mask);
  m["advantage_mean"] = moments.mean;
  m["advantage_std"] = moments.std;
  if (!actor_stage(share, advantages, /*train=*/!warmup, m)) return record_skip(result);
  if (!warmup) {
    result.policy_updated = true;
    ++policy_version_;
  }
  if (config_.baseline == BaselineKind::kRunningMean) {
    for (const auto& tr : kept) running_baseline_.push(tr.total_reward());
  }
}

CriticOutputs Learner::share_critic_outputs(const TrajectoryBatch& share) {
  if (plan_.pieces.size() == 1) return critic_outputs(critic_, share.input_ids, share.lengths, plan_.pieces[0].buckets);
  CriticOutputs out;
  for (const auto& piece : plan_.pieces) {
    const auto rows = piece_batch(share, piece);
    const auto part = critic_outputs(critic_, rows.input_ids, rows.lengths, piece.buckets);
    if (!out.values.defined()) {
      out.values = torch::zeros({share.batch_size(), share.max_length()}, part.values.options());
      out.bootstrap = torch::zeros({share.batch_size()}, part.bootstrap.options());
    }
    const auto index = row_index(piece.rows, part.values.device());
    out.values.index_copy_(0, index, part.values);
    out.bootstrap.index_copy_(0, index, part.bootstrap);
  }
  return out;
}

torch::Tensor Learner::critic_stage(const TrajectoryBatch& batch, StepResult& result) {
  Metrics& m = result.metrics;
  const int64_t rows = batch.batch_size();
  // The first update's forward pass is also the snapshot: the critic has
  // not changed yet, so its values, detached, are what the fixed targets
  // need. That saves one critic forward of the K + 2 the stage would run.
  // With micro-batches the snapshot runs without a graph (one graph per
  // piece held to the update would undo what micro-batching saves).
  const bool reuse = config_.critic_updates > 0 && plan_.pieces.size() == 1;
  CriticOutputs first;
  {
    const torch::AutoGradMode grad_mode(reuse);
    first = share_critic_outputs(batch);
  }
  const CriticOutputs snapshot{first.values.detach(), first.bootstrap.detach()};
  // Fixed targets for all K updates (SAO.md step 2).
  auto targets = skip_observation_gae(batch.rewards, snapshot.values, batch.action_mask, batch.terminated,
                                      snapshot.bootstrap, config_.gamma, constant_lambda(rows, config_.lambda_critic))
                     .returns;
  result.critic_targets = targets;
  {
    // 1 - Var(R - V) / Var(R) over every rank's action tokens.
    const auto of_targets = moments_over_ranks(*ranks_, targets, batch.action_mask);
    const auto of_errors = moments_over_ranks(*ranks_, targets - snapshot.values, batch.action_mask);
    const double var_r = of_targets.std * of_targets.std;
    if (var_r > 0) m["explained_variance"] = 1.0 - of_errors.std * of_errors.std / var_r;
  }
  for (int64_t k = 0; k < config_.critic_updates; ++k) {
    if (!critic_update(batch, targets, snapshot.values, m, k == 0 && reuse ? &first : nullptr)) {
      record_skip(result);
      return {};
    }
    ++result.critic_updates;
  }
  CriticOutputs fresh;
  {
    torch::NoGradGuard no_grad;
    fresh = share_critic_outputs(batch);
  }
  m["value_loss_final"] = reduce_numbers(
      *ranks_, {value_loss(fresh.values, targets, batch.action_mask, {}, 0.0, batch_action_tokens_).item<double>()},
      ReduceOp::kSum)[0];
  auto lambdas = config_.adaptive_lambda ? length_adaptive_lambda(batch.action_mask, config_.lambda_alpha)
                                         : constant_lambda(rows, config_.lambda_policy);
  // Also computed during warm-up: the policy metrics are still reported.
  return skip_observation_gae(batch.rewards, fresh.values, batch.action_mask, batch.terminated, fresh.bootstrap,
                              config_.gamma, lambdas)
      .advantages;
}

bool Learner::critic_update(const TrajectoryBatch& batch, const torch::Tensor& targets, const torch::Tensor& old_values,
                            Metrics& m, const CriticOutputs* current) {
  critic_optimizer_->zero_grad();
  double loss_sum = 0.0;
  for (const auto& piece : plan_.pieces) {
    const auto rows = piece_batch(batch, piece);
    const auto out =
        current != nullptr ? *current : critic_outputs(critic_, rows.input_ids, rows.lengths, piece.buckets);
    auto loss = value_loss(out.values, piece_rows(targets, batch, piece), rows.action_mask,
                           piece_rows(old_values, batch, piece), config_.value_clip, batch_action_tokens_);
    loss_sum += loss.item<double>();
    loss.backward();
  }
  // The whole batch's loss: every rank sees the same number, so all take
  // (or all skip) the step.
  const double loss_value = reduce_numbers(*ranks_, {loss_sum}, ReduceOp::kSum)[0];
  if (!m.count("value_loss")) m["value_loss"] = loss_value;
  if (!std::isfinite(loss_value)) return false;
  reduce_gradients(*ranks_, critic_params_);
  const double norm = clip_gradients(critic_params_, config_.max_grad_norm);
  m["value_grad_norm"] = norm;
  if (!std::isfinite(norm)) return false;
  critic_optimizer_->step();
  return true;
}

torch::Tensor Learner::baseline_advantages(const TrajectoryBatch& batch, Metrics& m) const {
  const int64_t rows = batch.batch_size();
  std::vector<double> returns(static_cast<size_t>(rows));
  for (int64_t b = 0; b < rows; ++b) returns[static_cast<size_t>(b)] = batch.returns[b].item<double>();
  if (config_.baseline == BaselineKind::kGroup) {
    std::vector<int64_t> groups(static_cast<size_t>(rows));
    std::map<int64_t, int64_t> sizes;
    for (int64_t b = 0; b < rows; ++b) ++sizes[groups[static_cast<size_t>(b)] = batch.group_ids[b].item<int64_t>()];
    for (const auto& [group, size] : sizes) {
      if (size != config_.group_size) {
        throw Error("learner: GRPO group " + std::to_string(group) + " has " + std::to_string(size) +
                    " trajectories in this batch; group_size is " + std::to_string(config_.group_size));
      }
    }
    auto advantages = grpo_advantages(returns, groups, config_.grpo_scale_by_std);
    return broadcast_to_actions(advantages, batch.action_mask.cpu()).to(device_);
  }
  // Running mean: V = b on every action token and as bootstrap, lambda = 1,
  // so A_t = (return from t) - b.
  const double baseline = running_baseline_.mean();
  m["baseline_mean"] = baseline;
  auto values = batch.action_mask.to(torch::kFloat32) * baseline;  // [B, T]
  auto bootstrap = torch::full({rows}, baseline, values.options());
  return skip_observation_gae(batch.rewards, values, batch.action_mask, batch.terminated, bootstrap, config_.gamma,
                              constant_lambda(rows, 1.0))
      .advantages;
}

bool Learner::actor_stage(const TrajectoryBatch& batch, const torch::Tensor& advantages, bool train, Metrics& m) {
  // Warm-up: the policy's metrics only, no graph and no step.
  const torch::AutoGradMode grad_mode(train);
  if (train) actor_optimizer_->zero_grad();
  std::vector<double> sums(kActorSums, 0.0);
  std::vector<double> maxes(kActorMaxes, -std::numeric_limits<double>::infinity());
  for (const auto& piece : plan_.pieces) {
    const auto rows = piece_batch(batch, piece);
    auto out = policy_outputs(policy_, rows.input_ids, piece.buckets);
    const auto mask = rows.action_mask.to(torch::kBool);
    sums[kEntropy] += out.entropy.detach().masked_select(mask).to(torch::kFloat64).sum().item<double>();
    add_logprob_agreement(out.logprobs, rows, policy_version_, config_.dis, sums, maxes);
    auto loss =
        compute_policy_loss(config_, out.logprobs, rows, piece_rows(advantages, batch, piece), batch_action_tokens_);
    sums[kActions] += static_cast<double>(loss.tokens);
    sums[kLoss] += loss.loss.item<double>();
    sums[kBelow] += static_cast<double>(loss.below_tokens);
    sums[kAbove] += static_cast<double>(loss.above_tokens);
    sums[kDual] += static_cast<double>(loss.dual_clip_tokens);
    sums[kRatio] += loss.ratio_sum;
    maxes[kRatioMax] = std::max(maxes[kRatioMax], loss.ratio_max);
    if (train) loss.loss.backward();
  }
  sums = reduce_numbers(*ranks_, sums, ReduceOp::kSum);
  maxes = reduce_numbers(*ranks_, maxes, ReduceOp::kMax);
  const double actions = sums[kActions];
  const bool dis = config_.policy_loss == PolicyLossKind::kDis;
  m["entropy"] = sums[kEntropy] / actions;
  m["policy_loss"] = sums[kLoss];
  m["ratio_mean"] = sums[kRatio] / actions;
  m["ratio_max"] = maxes[kRatioMax];
  m[dis ? "dis_reject_low_frac" : "ppo_clip_low_frac"] = sums[kBelow] / actions;
  m[dis ? "dis_reject_high_frac" : "ppo_clip_high_frac"] = sums[kAbove] / actions;
  if (!dis) m["ppo_dual_clip_frac"] = sums[kDual] / actions;
  m["lag0_tokens"] = sums[kLag0];
  if (sums[kLag0] > 0) {  // the other two keys are absent: no token to compare
    m["logprob_gap_lag0_max"] = maxes[kLag0GapMax];
    m["logprob_outside_dis_lag0_frac"] = sums[kLag0Outside] / sums[kLag0];
  }
  if (!train) return true;
  if (!std::isfinite(m["policy_loss"])) return false;
  reduce_gradients(*ranks_, actor_params_);
  const double norm = clip_gradients(actor_params_, config_.max_grad_norm);
  m["grad_norm"] = norm;
  if (!std::isfinite(norm)) return false;
  actor_optimizer_->step();
  return true;
}

void Learner::share_state(int root) {
  if (ranks_->size() == 1) return;
  torch::NoGradGuard no_grad;
  const auto& window = running_baseline_.values();
  auto counters =
      torch::tensor({steps_, policy_version_, skipped_nonfinite_, static_cast<int64_t>(window.size())}, torch::kInt64);
  ranks_->broadcast(counters, root);
  steps_ = counters[0].item<int64_t>();
  policy_version_ = counters[1].item<int64_t>();
  skipped_nonfinite_ = counters[2].item<int64_t>();
  auto rewards = torch::zeros({counters[3].item<int64_t>()}, torch::kFloat64);
  if (ranks_->rank() == root)
    rewards = torch::tensor(std::vector<double>(window.begin(), window.end()), torch::kFloat64);
  if (rewards.numel() > 0) ranks_->broadcast(rewards, root);
  running_baseline_.restore(
      std::vector<double>(rewards.data_ptr<double>(), rewards.data_ptr<double>() + rewards.numel()));
  auto parameters = policy_->parameters();
  if (!critic_.is_empty()) {
    for (const auto& p : critic_->parameters()) parameters.push_back(p);
  }
  broadcast_tensors(*ranks_, parameters, root);
  actor_optimizer_->share_from(root);
  if (critic_optimizer_) critic_optimizer_->share_from(root);
}

int64_t Learner::fingerprint() {
  std::vector<torch::Tensor> tensors = policy_->parameters();
  if (!critic_.is_empty()) {
    for (const auto& p : critic_->parameters()) tensors.push_back(p);
  }
  auto add_moments = [&](ShardedAdamW* optimizer) {
    if (optimizer == nullptr || optimizer->sharded()) return;
    for (const auto& p : optimizer->params()) {
      if (const auto* state = adamw_state(optimizer->local(), p)) {
        tensors.push_back(state->exp_avg());
        tensors.push_back(state->exp_avg_sq());
      }
    }
  };
  add_moments(actor_optimizer_.get());
  add_moments(critic_optimizer_.get());
  return bit_fingerprint(tensors);
}

int64_t Learner::optimizer_state_bytes() {
  return actor_optimizer_->state_bytes() + (critic_optimizer_ ? critic_optimizer_->state_bytes() : 0);
}

void Learner::check_ranks_agree() {
  if (ranks_->size() == 1) return;
  const auto prints = gather_numbers(*ranks_, fingerprint());
  std::string differing;
  for (size_t r = 1; r < prints.size(); ++r) {
    if (prints[r] != prints[0]) differing += (differing.empty() ? "" : ", ") + std::to_string(r);
  }
  if (!differing.empty()) {
    throw RankFailure("learner ranks diverged at step " + std::to_string(steps_) +
                      ": the weights and moments of rank(s) " + differing + " differ from rank 0's (fingerprints " +
                      std::to_string(prints[0]) + " vs " +
                      std::to_string(prints[std::stoul(differing.substr(0, differing.find(',')))]) +
                      "); the run stops, resume it from its last checkpoint");
  }
}

void Learner::save(const std::string& dir) {
  if (ranks_->rank() != 0) {  // ZeRO-1: send this rank's shards to rank 0
    actor_optimizer_->save("", 0);
    if (critic_optimizer_) critic_optimizer_->save("", 0);
    return;
  }
  fs::create_directories(dir);
  const fs::path root(dir);
  model::save_safetensors((root / "policy.safetensors").string(), model::named_tensors_of(*policy_),
                          {{"policy_version", std::to_string(policy_version_)}});
  actor_optimizer_->save((root / "actor_optimizer.pt").string(), 0);
  if (config_.uses_critic()) {
    model::save_safetensors((root / "critic.safetensors").string(), model::named_tensors_of(*critic_));
    critic_optimizer_->save((root / "critic_optimizer.pt").string(), 0);
  }
  const auto& window = running_baseline_.values();
  nlohmann::json state = {{"format", kStateFormat},
                          {"step", steps_},
                          {"policy_version", policy_version_},
                          {"skipped_nonfinite", skipped_nonfinite_},
                          {"running_mean", std::vector<double>(window.begin(), window.end())},
                          {"config", config_.to_json()}};
  base::write_text_file_atomically((root / "learner_state.json").string(), base::dump_json(state, 2) + "\n");
}

namespace {
// torch::load throws c10::Error with a C++ backtrace for a truncated or
// foreign file; the user gets the file's name and the first line instead.
void load_optimizer_state(torch::optim::Optimizer& optimizer, const fs::path& path) {
  { model::RegularFile check(path.string()); }  // a FIFO or device is refused, not read
  try {
    torch::load(optimizer, path.string());
  } catch (const c10::Error& error) {
    std::string what = error.what();
    what = what.substr(0, what.find('\n'));
    throw Error("learner checkpoint " + path.string() + ": not a readable optimizer state: " + what);
  }
}
}  // namespace

LearnerState read_learner_state(const std::string& dir) {
  const std::string state_path = (fs::path(dir) / "learner_state.json").string();
  // A few kilobytes in practice (the running-mean window is the largest part).
  constexpr std::uint64_t kMaxStateBytes = 64ull * 1024 * 1024;
  const auto json = base::parse_json_limited(model::read_regular_file(state_path, kMaxStateBytes), state_path);
  base::JsonReader reader(json, state_path);
  LearnerState state;
  std::string format;
  reader.read("format", format);
  if (format != kStateFormat) throw Error(state_path + ".format: expected '" + std::string(kStateFormat) + "'");
  constexpr base::IntRange kCount{0, std::numeric_limits<int64_t>::max()};
  reader.read("step", state.step, kCount);
  reader.read("policy_version", state.policy_version, kCount);
  reader.read("skipped_nonfinite", state.skipped_nonfinite, kCount);
  // Rewards' running mean: any finite value.
  reader.read("running_mean", state.running_mean,
              base::RealRange{-std::numeric_limits<double>::max(), std::numeric_limits<double>::max()});
  reader.section("config");  // informational: the learner keeps the config it was built with
  reader.reject_unknown_keys();
  return state;
}

void Learner::load(const std::string& dir) {
  const fs::path root(dir);
  std::vector<std::string> needed = {"learner_state.json", "policy.safetensors", "actor_optimizer.pt"};
  if (config_.uses_critic()) {
    needed.push_back("critic.safetensors");
    needed.push_back("critic_optimizer.pt");
  }
  for (const auto& name : needed) {
    if (!fs::exists(root / name)) throw Error("learner checkpoint " + dir + ": missing " + name);
  }
  const auto saved = read_learner_state(dir);
  const std::string state_path = (root / "learner_state.json").string();
  const int64_t step = saved.step, version = saved.policy_version, skipped = saved.skipped_nonfinite;
  const std::vector<double>& window = saved.running_mean;
  if (window.size() > static_cast<size_t>(config_.running_mean_window)) {
    throw Error(state_path + ".running_mean: " + std::to_string(window.size()) +
                " rewards exceed running_mean_window " + std::to_string(config_.running_mean_window));
  }
  model::load_into_module(*policy_, (root / "policy.safetensors").string(), /*strict=*/true);
  load_optimizer_state(actor_optimizer_->load_target(), root / "actor_optimizer.pt");
  if (config_.uses_critic()) {
    model::load_into_module(*critic_, (root / "critic.safetensors").string(), /*strict=*/true);
    load_optimizer_state(critic_optimizer_->load_target(), root / "critic_optimizer.pt");
  }
  running_baseline_.restore(window);
  steps_ = step;
  policy_version_ = version;
  skipped_nonfinite_ = skipped;
}

}  // namespace sao::algo
