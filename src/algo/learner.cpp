// The learner step; see learner.hpp for the sequence and its guarantees.
#include "algo/learner.hpp"

#include "model/device.hpp"

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

std::unique_ptr<torch::optim::AdamW> make_adamw(const std::vector<torch::Tensor>& params, double lr,
                                                const LearnerConfig& c) {
  auto options = torch::optim::AdamWOptions(lr)
                     .betas(std::make_tuple(c.adam_beta1, c.adam_beta2))
                     .eps(c.adam_eps)
                     .weight_decay(c.weight_decay);
  return std::make_unique<torch::optim::AdamW>(params, options);
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
                                     const TrajectoryBatch& batch, const torch::Tensor& advantages, Metrics& m) {
  const bool dis = c.policy_loss == PolicyLossKind::kDis;
  auto result = dis ? dis_loss(logprobs, batch.behaviour_logprobs, advantages, batch.action_mask, c.dis)
                    : ppo_clip_loss(logprobs, batch.behaviour_logprobs, advantages, batch.action_mask, c.ppo);
  m["policy_loss"] = result.loss.item<double>();
  m["ratio_mean"] = result.ratio_mean;
  m["ratio_max"] = result.ratio_max;
  m[dis ? "dis_reject_low_frac" : "ppo_clip_low_frac"] = result.below_frac;
  m[dis ? "dis_reject_high_frac" : "ppo_clip_high_frac"] = result.above_frac;
  if (!dis) m["ppo_dual_clip_frac"] = result.dual_clip_frac;
  return result;
}

// Rollout against learner log-probs on the action tokens sampled by the
// weights the learner holds now (lag 0): the same weights produced both, so
// they may differ only by numerics (KV cache, batching, kernels, precision).
// A gap here is a bug in recording or recomputing log-probs, which DIS would
// otherwise silently treat as off-policy drift. `logprobs` is this step's
// forward pass; nothing is recomputed.
void logprob_agreement_metrics(const torch::Tensor& logprobs, const TrajectoryBatch& batch, int64_t learner_version,
                               const DisOptions& band, Metrics& m) {
  torch::NoGradGuard no_grad;
  const auto lag0 = batch.action_mask & (batch.versions == learner_version);
  const int64_t tokens = lag0.sum().item<int64_t>();
  m["lag0_tokens"] = static_cast<double>(tokens);
  if (tokens == 0) return;  // the other two keys are absent: no token to compare
  const auto learner = logprobs.detach().masked_select(lag0);
  const auto rollout = batch.behaviour_logprobs.masked_select(lag0).to(learner.scalar_type());
  m["logprob_gap_lag0_max"] = (rollout.to(torch::kFloat64) - learner.to(torch::kFloat64)).abs().max().item<double>();
  // The ratio as dis_loss computes it (same dtype), so the count matches its rejections.
  const auto outside = dis_outside_band((learner - rollout).exp(), band);
  m["logprob_outside_dis_lag0_frac"] =
      static_cast<double>((outside.below | outside.above).sum().item<int64_t>()) / static_cast<double>(tokens);
}

constexpr const char* kStateFormat = "sao-learner-state-v1";

}  // namespace

Learner::Learner(LearnerConfig config, model::CausalLM policy, model::ValueModel critic)
    : config_(config),
      policy_(std::move(policy)),
      critic_(std::move(critic)),
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
  actor_params_ = trainable(policy_->parameters());
  if (actor_params_.empty()) throw Error("learner: the policy has no trainable parameter");
  actor_optimizer_ = make_adamw(actor_params_, config_.actor_lr, config_);
  if (!config_.uses_critic()) return;
  check_no_shared_storage(*policy_, *critic_);
  if (critic_->parameters().front().device() != device_) throw Error("learner: policy and critic on different devices");
  model::set_group_trainable(*critic_, model::ParamGroup::kAttention, !config_.freeze_critic_attention);
  critic_params_ = trainable(critic_->parameters());
  critic_optimizer_ = make_adamw(critic_params_, config_.critic_lr, config_);
}

namespace {
void set_optimizer_lr(torch::optim::AdamW& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
}
}  // namespace

void Learner::set_actor_lr(double lr) {
  if (!(lr > 0.0) || !std::isfinite(lr)) throw Error("learner: actor_lr must be a positive number");
  config_.actor_lr = lr;
  set_optimizer_lr(*actor_optimizer_, lr);
}

void Learner::set_critic_lr(double lr) {
  if (!critic_optimizer_) throw Error("learner: critic_lr: this learner has no critic (baseline is not 'critic')");
  if (!(lr > 0.0) || !std::isfinite(lr)) throw Error("learner: critic_lr must be a positive number");
  config_.critic_lr = lr;
  set_optimizer_lr(*critic_optimizer_, lr);
}

void Learner::check_admissible(const std::vector<Trajectory>& trajectories) const {
  for (size_t i = 0; i < trajectories.size(); ++i) {
    const auto& tr = trajectories[i];
    const std::string where = "trajectory " + std::to_string(i);
    tr.validate(where);
    for (size_t t = 0; t < tr.size(); ++t) {
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
  StepResult result;
  check_admissible(trajectories);
  if (!trajectories.empty()) train(trajectories, result);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Metrics& m = result.metrics;
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
  const auto batch = batch_to(collate(kept, config_.pad_id), device_);
  batch_metrics(kept, batch, policy_version_, m);
  {
    const auto lengths = batch.lengths.to(torch::kCPU, torch::kInt64).contiguous();
    buckets_ = plan_length_buckets(
        std::vector<int64_t>(lengths.data_ptr<int64_t>(), lengths.data_ptr<int64_t>() + lengths.numel()),
        config_.max_length_buckets, kLengthBucketOverheadTokens);
    m["length_buckets"] = static_cast<double>(buckets_.size());
  }
  const bool warmup = config_.uses_critic() && steps_ < config_.critic_warmup_steps;
  m["critic_only"] = warmup ? 1.0 : 0.0;
  ++steps_;
  if (!inputs_finite(batch)) return record_skip(result);
  auto advantages = config_.uses_critic() ? critic_stage(batch, result) : baseline_advantages(batch, m);
  if (result.skipped_nonfinite) return;
  if (config_.normalize_advantages) advantages = normalize_advantages(advantages, batch.action_mask);
  result.advantages = advantages;
  auto selected = advantages.masked_select(batch.action_mask).to(torch::kFloat64);
  m["advantage_mean"] = selected.mean().item<double>();
  m["advantage_std"] = selected.std(/*unbiased=*/false).item<double>();
  if (!actor_stage(batch, advantages, /*train=*/!warmup, m)) return record_skip(result);
  if (!warmup) {
    result.policy_updated = true;
    ++policy_version_;
  }
  if (config_.baseline == BaselineKind::kRunningMean) {
    for (const auto& tr : kept) running_baseline_.push(tr.total_reward());
  }
}

torch::Tensor Learner::critic_stage(const TrajectoryBatch& batch, StepResult& result) {
  Metrics& m = result.metrics;
  const int64_t rows = batch.batch_size();
  // The first update's forward pass is also the snapshot: the critic has
  // not changed yet, so its values, detached, are what the fixed targets
  // need. That saves one critic forward of the K + 2 the stage would run.
  const bool updates = config_.critic_updates > 0;
  CriticOutputs first;
  {
    const torch::AutoGradMode grad_mode(updates);
    first = critic_outputs(critic_, batch.input_ids, batch.lengths, buckets_);
  }
  const CriticOutputs snapshot{first.values.detach(), first.bootstrap.detach()};
  // Fixed targets for all K updates (SAO.md step 2).
  auto targets = skip_observation_gae(batch.rewards, snapshot.values, batch.action_mask, batch.terminated,
                                      snapshot.bootstrap, config_.gamma, constant_lambda(rows, config_.lambda_critic))
                     .returns;
  result.critic_targets = targets;
  const double ev = explained_variance(snapshot.values, targets, batch.action_mask);
  if (std::isfinite(ev)) m["explained_variance"] = ev;
  for (int64_t k = 0; k < config_.critic_updates; ++k) {
    if (!critic_update(batch, targets, snapshot.values, m, k == 0 ? &first : nullptr)) {
      record_skip(result);
      return {};
    }
    ++result.critic_updates;
  }
  CriticOutputs fresh;
  {
    torch::NoGradGuard no_grad;
    fresh = critic_outputs(critic_, batch.input_ids, batch.lengths, buckets_);
  }
  m["value_loss_final"] = value_loss(fresh.values, targets, batch.action_mask).item<double>();
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
  auto out = current != nullptr ? *current : critic_outputs(critic_, batch.input_ids, batch.lengths, buckets_);
  auto loss = value_loss(out.values, targets, batch.action_mask, old_values, config_.value_clip);
  const double loss_value = loss.item<double>();
  if (!m.count("value_loss")) m["value_loss"] = loss_value;
  if (!std::isfinite(loss_value)) return false;
  loss.backward();
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
  if (!train) {  // warm-up: policy metrics only
    torch::NoGradGuard no_grad;
    auto out = policy_outputs(policy_, batch.input_ids, buckets_);
    m["entropy"] = mean_over_actions(out.entropy, batch.action_mask);
    logprob_agreement_metrics(out.logprobs, batch, policy_version_, config_.dis, m);
    compute_policy_loss(config_, out.logprobs, batch, advantages, m);
    return true;
  }
  actor_optimizer_->zero_grad();
  auto out = policy_outputs(policy_, batch.input_ids, buckets_);
  m["entropy"] = mean_over_actions(out.entropy, batch.action_mask);
  logprob_agreement_metrics(out.logprobs, batch, policy_version_, config_.dis, m);
  auto loss = compute_policy_loss(config_, out.logprobs, batch, advantages, m);
  if (!std::isfinite(m["policy_loss"])) return false;
  loss.loss.backward();
  const double norm = clip_gradients(actor_params_, config_.max_grad_norm);
  m["grad_norm"] = norm;
  if (!std::isfinite(norm)) return false;
  actor_optimizer_->step();
  return true;
}

void Learner::save(const std::string& dir) const {
  fs::create_directories(dir);
  const fs::path root(dir);
  model::save_safetensors((root / "policy.safetensors").string(), model::named_tensors_of(*policy_),
                          {{"policy_version", std::to_string(policy_version_)}});
  torch::save(*actor_optimizer_, (root / "actor_optimizer.pt").string());
  if (config_.uses_critic()) {
    model::save_safetensors((root / "critic.safetensors").string(), model::named_tensors_of(*critic_));
    torch::save(*critic_optimizer_, (root / "critic_optimizer.pt").string());
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
  load_optimizer_state(*actor_optimizer_, root / "actor_optimizer.pt");
  if (config_.uses_critic()) {
    model::load_into_module(*critic_, (root / "critic.safetensors").string(), /*strict=*/true);
    load_optimizer_state(*critic_optimizer_, root / "critic_optimizer.pt");
  }
  running_baseline_.restore(window);
  steps_ = step;
  policy_version_ = version;
  skipped_nonfinite_ = skipped;
}

}  // namespace sao::algo
