// LoRA adapters (model.lora): the config section and PEFT's
// adapter_config.json, which parameters train, the maths of an adapted
// projection and of merging, checkpoint files, adapter-only weight packets,
// a learner step that moves the adapters and nothing else, and a base kept
// in bf16 (learner.lora_base_dtype).
// (test_parity_lora.cpp checks the files against an independent PEFT reader.)
#include "algo/learner.hpp"
#include "base/error.hpp"
#include "model/checkpoint.hpp"
#include "model/lora.hpp"
#include "model/model_config.hpp"
#include "model/safetensors.hpp"
#include "model/tensor_blob.hpp"
#include "model/transformer.hpp"
#include "test_tiny_model.hpp"
#include "train/memory_estimate.hpp"
#include "weights/packet.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>

namespace {

namespace fs = std::filesystem;
using sao::model::CausalLM;
using sao::model::LoraConfig;

bool throws_with(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
  } catch (const std::exception& e) {
    const std::string text = e.what();
    if (text.find(needle) != std::string::npos) return true;
    MESSAGE("threw: " << text);
    return false;
  }
  MESSAGE("did not throw");
  return false;
}

fs::path temp_dir(const std::string& stem) {
  static int counter = 0;
  auto dir = fs::temp_directory_path() /
             ("sao_lora_" + stem + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  fs::remove_all(dir);
  return dir;
}

LoraConfig lora_of(int64_t rank, double alpha, std::vector<std::string> targets) {
  LoraConfig lora;
  lora.rank = rank;
  lora.alpha = alpha;
  lora.targets = std::move(targets);
  return lora;
}

// tiny_policy with adapters attached and drawn away from B = 0.
CausalLM adapted_policy(const LoraConfig& lora, uint64_t seed = 5) {
  auto policy = sao_test::tiny_policy(seed);
  policy->attach_lora(lora);
  torch::manual_seed(seed);
  torch::NoGradGuard no_grad;
  for (auto& [name, tensor] : sao::model::lora_tensors(*policy)) tensor.copy_(torch::randn_like(tensor) * 0.3);
  return policy;
}

torch::Tensor tokens() {
  return torch::tensor(std::vector<int64_t>{1, 4, 9, 16, 25, 3, 7, 2, 5, 11, 13, 30}).view({2, 6});
}

double relative_error(const torch::Tensor& got, const torch::Tensor& want) {
  return ((got - want).abs().max() / want.abs().max()).item<double>();
}

// Token ids within the tiny learner model's vocabulary.
torch::Tensor small_tokens() {
  return torch::tensor(std::vector<int64_t>{1, 4, 9, 3, 7, 2, 5, 11, 13, 6, 8, 10}).view({2, 6});
}

// A LoRA learner's batch: 4 one-turn trajectories of 2 actions.
std::vector<sao::algo::Trajectory> small_batch() {
  std::mt19937_64 rng(4);
  std::vector<sao::algo::Trajectory> batch;
  for (int i = 0; i < 4; ++i) {
    sao::algo::Turn turn;
    turn.action_tokens = {static_cast<int64_t>(2 + rng() % 14), static_cast<int64_t>(2 + rng() % 14)};
    turn.logprobs = {-2.7f, -2.7f};
    turn.versions = {0, 0};
    batch.push_back(sao::algo::make_trajectory({1, 3}, {turn}, static_cast<double>(i % 2), true, i));
  }
  return batch;
}

}  // namespace

TEST_CASE("model.lora: read from a run config, written back, refused by name when wrong") {
  auto json = sao::model::model_config_settings_to_json(sao_test::tiny_config());
  json["lora"] = {{"rank", 8}, {"alpha", 16}, {"targets", {"v_proj", "q_proj"}}};
  const auto config = sao::model::model_config_from_json(json, "run.json", sao::model::ConfigKind::kRunConfig);
  CHECK(config.lora.rank == 8);
  CHECK(config.lora.alpha == 16.0);
  CHECK(config.lora.dropout == 0.0);
  CHECK(config.lora.targets == std::vector<std::string>{"q_proj", "v_proj"});  // layer order
  CHECK(config.lora.scaling() == 2.0);
  // Written back for the cluster's nodes, never into a Hugging Face config.json.
  CHECK(sao::model::model_config_settings_to_json(config).at("lora").at("rank") == 8);
  CHECK(!sao::model::model_config_to_json(config).contains("lora"));
  // A Hugging Face config.json's "lora" is not sao's to read.
  CHECK(!sao::model::model_config_from_json(json, "config.json", sao::model::ConfigKind::kHuggingFace).lora.enabled());
  // q, v at r=8 on a 2-layer 32-wide model: per layer 8*(32+32) + 8*(32+16).
  CHECK(config.lora_parameter_count() == 2 * (8 * 64 + 8 * 48));
  CHECK(config.trainable_parameter_count() == config.lora_parameter_count());

  const auto refused = [&](nlohmann::json lora, const std::string& needle) {
    auto bad = json;
    bad["lora"] = lora;
    return throws_with([&] { sao::model::model_config_from_json(bad, "run.json", sao::model::ConfigKind::kRunConfig); },
                       needle);
  };
  CHECK(refused({{"rank", 4}, {"targets", {"qproj"}}}, "'qproj', which is not a projection sao can adapt"));
  CHECK(refused({{"rank", 4}, {"targets", {"q_proj", "q_proj"}}}, "names 'q_proj' twice"));
  CHECK(refused({{"rank", 4}, {"targets", nlohmann::json::array()}}, "lora.targets is empty"));
  CHECK(refused({{"rank", 4294967298LL}}, "rank"));
  CHECK(refused({{"rank", -1}}, "rank"));
  CHECK(refused({{"rank", 4}, {"dropout", 1.0}}, "dropout"));
  CHECK(refused({{"rank", 4}, {"alpha", 0}}, "alpha"));
  CHECK(refused({{"rank", 4}, {"alpah", 2}}, "alpah"));
  CHECK(refused("r16", "lora"));
}

TEST_CASE("a LoRA policy trains its adapters only, computes W x + alpha/r B A x, and merges to the same function") {
  const auto lora = lora_of(4, 8.0, {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"});
  auto base = sao_test::tiny_policy(5);
  auto policy = sao_test::tiny_policy(5);
  policy->attach_lora(lora);
  CHECK(policy->config().lora == lora);
  CHECK(throws_with([&] { policy->attach_lora(lora); }, "has adapters already"));
  int64_t trainable = 0;
  for (const auto& item : policy->named_parameters()) {
    CAPTURE(item.key());
    CHECK(item.value().requires_grad() == sao::model::is_lora_tensor_name(item.key()));
    if (item.value().requires_grad()) trainable += item.value().numel();
  }
  CHECK(trainable == policy->config().lora_parameter_count());
  // The names and shapes policy_tensor_shapes promises, adapters included.
  const auto shapes = sao::model::policy_tensor_shapes(policy->config());
  const auto named = sao::model::named_tensors_of(*policy);
  REQUIRE(shapes.size() == named.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    CHECK(shapes[i].first == named[i].first);
    CHECK(c10::IntArrayRef(shapes[i].second) == named[i].second.sizes());
  }
  CHECK(named[2].first == "model.layers.0.self_attn.q_proj.lora_A.weight");

  torch::NoGradGuard no_grad;
  // PEFT's start: B = 0, so the adapted policy is its base, bit for bit.
  sao::model::init_lora(policy, 3);
  CHECK(torch::equal(policy->forward(tokens()), base->forward(tokens())));
  auto& q = *policy->model->layers[0]->as<sao::model::DecoderLayerImpl>()->self_attn;
  const auto a = q.q_lora.a->weight;
  CHECK(a.abs().max().item<double>() <= 1.0 / std::sqrt(32.0));  // Kaiming-uniform bound 1/sqrt(in)
  CHECK(a.abs().max().item<double>() > 0.5 / std::sqrt(32.0));

  // One projection by hand: W x + b + (alpha / r) B A x.
  policy = adapted_policy(lora);
  auto& attention = *policy->model->layers[0]->as<sao::model::DecoderLayerImpl>()->self_attn;
  const auto x = torch::randn({3, 32});
  const auto want =
      torch::matmul(x, attention.q_proj->weight.t()) +
      2.0 * torch::matmul(torch::matmul(x, attention.q_lora.a->weight.t()), attention.q_lora.b->weight.t());
  CHECK(relative_error(sao::model::project(attention.q_proj, attention.q_lora, x, false), want) < 1e-6);

  const auto adapted = policy->forward(tokens());
  CHECK(relative_error(adapted, base->forward(tokens())) > 1e-2);
  auto merged = sao::model::merge_lora(policy);
  CHECK(!merged->config().lora.enabled());
  CHECK(sao::model::lora_tensors(*merged).empty());
  CHECK(relative_error(merged->forward(tokens()), adapted) < 1e-5);
  // The critic stays a full model and starts from the base weights.
  sao::model::ValueModel critic(policy->config());
  CHECK(!critic->config().lora.enabled());
  sao::model::init_value_from_policy(critic, policy);
  CHECK(torch::equal(critic->model->norm->weight, policy->model->norm->weight));
}

TEST_CASE("gradients reach the adapters only; dropout acts in training passes only") {
  auto lora = lora_of(2, 4.0, {"q_proj", "down_proj"});
  auto policy = adapted_policy(lora);
  policy->train();
  policy->forward(tokens()).logsumexp(-1).sum().backward();
  for (const auto& item : policy->named_parameters()) {
    CAPTURE(item.key());
    CHECK(item.value().grad().defined() == sao::model::is_lora_tensor_name(item.key()));
  }
  lora.dropout = 0.5;
  auto dropped = adapted_policy(lora);
  torch::NoGradGuard no_grad;
  dropped->eval();
  const auto evaluated = dropped->forward(tokens());
  CHECK(torch::equal(dropped->forward(tokens()), evaluated));
  dropped->train();
  CHECK(!torch::equal(dropped->forward(tokens()), evaluated));
}

TEST_CASE("a LoRA checkpoint is a plain base directory plus PEFT's adapter files, and loads back exactly") {
  const auto lora = lora_of(4, 6.0, {"q_proj", "v_proj", "up_proj"});
  auto policy = adapted_policy(lora);
  const auto dir = temp_dir("checkpoint");
  sao::model::save_policy_checkpoint(dir.string(), policy, {{"tokenizer", "/models/Qwen2.5-0.5B"}});
  const auto base_file = sao::model::read_safetensors_header((dir / "model.safetensors").string());
  for (const auto& [name, info] : base_file.tensors) CHECK(!sao::model::is_lora_tensor_name(name));
  CHECK(base_file.tensors.size() == sao::model::base_tensors(*policy).size());
  const auto adapter_file = sao::model::read_safetensors_header((dir / "adapter_model.safetensors").string());
  CHECK(adapter_file.tensors.size() == 2 * 3 * 2);  // A and B, 3 targets, 2 layers
  CHECK(adapter_file.tensors.count("base_model.model.model.layers.1.mlp.up_proj.lora_B.weight") == 1);
  CHECK(adapter_file.tensors.at("base_model.model.model.layers.1.mlp.up_proj.lora_B.weight").shape ==
        std::vector<int64_t>{48, 4});
  const auto config = nlohmann::json::parse(std::ifstream(dir / "adapter_config.json"));
  CHECK(config.at("peft_type") == "LORA");
  CHECK(config.at("task_type") == "CAUSAL_LM");
  CHECK(config.at("r") == 4);
  CHECK(config.at("lora_alpha") == 6.0);
  CHECK(config.at("target_modules") == nlohmann::json({"q_proj", "v_proj", "up_proj"}));
  CHECK(config.at("bias") == "none");
  CHECK(config.at("base_model_name_or_path") == "/models/Qwen2.5-0.5B");

  auto loaded = sao::model::load_policy_checkpoint(dir.string());
  CHECK(loaded->config().lora == lora);
  torch::NoGradGuard no_grad;
  CHECK(torch::equal(loaded->forward(tokens()), policy->forward(tokens())));
  fs::remove_all(dir);
}

TEST_CASE("PEFT adapter files that sao would compute differently, or that do not fit, are refused by name") {
  const auto lora = lora_of(2, 4.0, {"q_proj", "v_proj"});
  auto policy = adapted_policy(lora);
  const auto dir = temp_dir("peft");
  sao::model::save_policy_checkpoint(dir.string(), policy, {{"tokenizer", "byte"}});
  fs::remove(dir / "MANIFEST.json");  // edited below, as a downloaded adapter would be
  const auto config_path = dir / "adapter_config.json";
  const auto original = nlohmann::json::parse(std::ifstream(config_path));
  const auto refused_config = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& needle) {
    auto json = original;
    edit(json);
    std::ofstream(config_path) << json.dump();
    const bool ok = throws_with([&] { sao::model::load_policy_checkpoint(dir.string()); }, needle);
    std::ofstream(config_path) << original.dump();
    return ok;
  };
  CHECK(refused_config([](auto& j) { j["use_dora"] = true; }, "'use_dora' is true"));
  CHECK(refused_config([](auto& j) { j["use_rslora"] = true; }, "'use_rslora' is true"));
  CHECK(refused_config([](auto& j) { j["rank_pattern"] = {{"q_proj", 8}}; }, "'rank_pattern'"));
  CHECK(refused_config([](auto& j) { j["modules_to_save"] = {"lm_head"}; }, "'modules_to_save'"));
  CHECK(refused_config([](auto& j) { j["bias"] = "all"; }, "'bias' is \"all\""));
  CHECK(refused_config([](auto& j) { j["some_new_option"] = 3; }, "'some_new_option' is 3"));
  CHECK(refused_config([](auto& j) { j["peft_type"] = "IA3"; }, "sao reads LORA adapters only"));
  CHECK(refused_config([](auto& j) { j["target_modules"] = ".*proj"; }, "list of projection names"));
  CHECK(refused_config([](auto& j) { j["target_modules"] = {"c_attn"}; }, "'c_attn'"));
  CHECK(refused_config([](auto& j) { j["r"] = 2.5; }, "'r' must be an integer"));
  CHECK(refused_config([](auto& j) { j["r"] = 3; }, "wrong shape for r = 3"));
  CHECK(refused_config([](auto& j) { j["target_modules"] = {"q_proj"}; }, "is not an adapter of this model"));
  CHECK(refused_config([](auto& j) { j["target_modules"] = {"q_proj", "v_proj", "o_proj"}; }, "is missing"));
  // "all-linear" is every projection (here: more than the file holds).
  CHECK(refused_config([](auto& j) { j["target_modules"] = "all-linear"; }, "lora_A.weight' is missing"));
  // A tensor the config does not imply.
  auto tensors = sao::model::load_safetensors((dir / "adapter_model.safetensors").string()).tensors;
  sao::model::NamedTensors extra(tensors.begin(), tensors.end());
  extra.emplace_back("base_model.model.lm_head.lora_A.weight", torch::zeros({2, 32}));
  sao::model::save_safetensors((dir / "adapter_model.safetensors").string(), extra);
  CHECK(throws_with([&] { sao::model::load_policy_checkpoint(dir.string()); },
                    "'base_model.model.lm_head.lora_A.weight' is not an adapter of this model"));
  fs::remove_all(dir);
}

TEST_CASE("weight packets: a LoRA version after the first carries the adapters only, and loads as a whole version") {
  const auto lora = lora_of(2, 4.0, {"q_proj", "v_proj"});
  auto learner_policy = adapted_policy(lora, 5);
  auto rollout_policy = CausalLM(learner_policy->config());
  // The first version: everything (the base the rollout has not got).
  const auto full = sao::weights::host_packet(0, sao::model::pack_module(*learner_policy));
  CHECK(!sao::weights::carries_adapters_only(full));
  sao::model::load_packed_into_module(*rollout_policy, full.tensors, "v0");
  torch::NoGradGuard no_grad;
  CHECK(torch::equal(rollout_policy->forward(tokens()), learner_policy->forward(tokens())));
  // A later version: its adapters, a small share of the bytes.
  for (auto& [name, tensor] : sao::model::lora_tensors(*learner_policy)) tensor.add_(0.1);
  const auto adapters =
      sao::weights::host_packet(1, sao::model::pack_tensors(sao::model::lora_tensors(*learner_policy)));
  CHECK(sao::weights::carries_adapters_only(adapters));
  CHECK(adapters.tensors.bytes.size() * 20 < full.tensors.bytes.size());
  sao::model::load_packed_into_module(*rollout_policy, adapters.tensors, "v1");
  CHECK(torch::equal(rollout_policy->forward(tokens()), learner_policy->forward(tokens())));
  // Part of the adapters is not a version: refused, the model unchanged.
  auto partial = adapters.tensors;
  partial.index.pop_back();
  CHECK(throws_with([&] { sao::model::load_packed_into_module(*rollout_policy, partial, "v2"); },
                    "v2: tensor 'model.layers.1.self_attn.v_proj.lora_B.weight' is missing"));
  CHECK(torch::equal(rollout_policy->forward(tokens()), learner_policy->forward(tokens())));
  // Adapters for a rollout built without them.
  auto plain = sao_test::tiny_policy(5);
  CHECK(throws_with([&] { sao::model::load_packed_into_module(*plain, adapters.tensors, "v1"); },
                    "is not a parameter of this model"));
}

TEST_CASE("a learner step on a LoRA policy moves the adapters and leaves the base as it was") {
  auto models = sao_test::tiny_learner_models(3);
  auto policy = models.policy;
  policy->attach_lora(lora_of(2, 4.0, {"q_proj", "v_proj", "gate_proj"}));
  sao::model::init_lora(policy, 9);
  std::map<std::string, torch::Tensor> before;
  for (const auto& item : policy->named_parameters()) before[item.key()] = item.value().detach().clone();
  sao::algo::LearnerConfig config;
  config.actor_lr = 1e-2;
  config.critic_lr = 1e-2;
  config.critic_warmup_steps = 0;
  sao::algo::Learner learner(config, policy, models.critic);
  const auto batch = small_batch();
  for (int step = 0; step < 2; ++step) CHECK(learner.step(batch).policy_updated);
  int64_t moved = 0;
  for (const auto& item : policy->named_parameters()) {
    CAPTURE(item.key());
    const bool adapter = sao::model::is_lora_tensor_name(item.key());
    if (adapter) {
      moved += torch::equal(item.value(), before[item.key()]) ? 0 : 1;
    } else {
      CHECK(torch::equal(item.value(), before[item.key()]));
    }
  }
  CHECK(moved == 2 * 3);  // every A and B of the one layer's three targets
  // AdamW state (two moments) for the adapters and the critic alone.
  int64_t critic_parameters = 0;
  for (const auto& p : models.critic->parameters()) critic_parameters += p.requires_grad() ? p.numel() : 0;
  CHECK(learner.optimizer_state_bytes() == 2 * 4 * (policy->config().lora_parameter_count() + critic_parameters));
}

TEST_CASE("learner.lora_base_dtype: a bf16 base trains fp32 adapters like an fp32 base and leaves as exact fp32") {
  sao::algo::LearnerConfig config;
  config.lora_base_dtype = "fp16";
  CHECK(throws_with([&] { config.validate("learner"); },
                    "learner.lora_base_dtype: expected \"auto\", \"fp32\" or \"bf16\", got \"fp16\""));
  config.lora_base_dtype = "auto";
  CHECK_FALSE(config.lora_base_bf16());  // on the CPU
  config.lora_base_dtype = "bf16";
  CHECK(config.lora_base_bf16());
  config.actor_lr = 1e-2;
  config.critic_lr = 1e-2;
  config.critic_warmup_steps = 0;

  // Two learners from the same start: one keeps the base in bf16, the other
  // holds the same (bf16-rounded) values in fp32.
  const auto lora = lora_of(2, 4.0, {"q_proj", "v_proj", "gate_proj"});
  auto low = sao_test::tiny_learner_models(3);
  low.policy->attach_lora(lora);
  sao::model::init_lora(low.policy, 9);
  auto wide = sao_test::tiny_learner_models(3);
  wide.policy->attach_lora(lora);
  {
    torch::NoGradGuard no_grad;
    const auto low_tensors = sao::model::named_tensors_of(*low.policy);
    auto wide_tensors = sao::model::named_tensors_of(*wide.policy);
    for (size_t i = 0; i < wide_tensors.size(); ++i) {
      const bool adapter = sao::model::is_lora_tensor_name(wide_tensors[i].first);
      wide_tensors[i].second.copy_(adapter ? low_tensors[i].second
                                           : low_tensors[i].second.to(torch::kBFloat16).to(torch::kFloat32));
    }
  }
  sao::algo::Learner low_learner(config, low.policy, low.critic);
  config.lora_base_dtype = "fp32";
  sao::algo::Learner wide_learner(config, wide.policy, wide.critic);
  CHECK(sao::model::has_low_precision_tensors(*low.policy));
  CHECK_FALSE(sao::model::has_low_precision_tensors(*wide.policy));
  std::map<std::string, torch::Tensor> before;
  for (const auto& item : low.policy->named_parameters()) {
    CAPTURE(item.key());
    const bool adapter = sao::model::is_lora_tensor_name(item.key());
    CHECK((item.value().scalar_type() == (adapter ? torch::kFloat32 : torch::kBFloat16)));
    before[item.key()] = item.value().detach().clone();
  }
  {
    torch::NoGradGuard no_grad;
    // The same function to bf16's precision.
    CHECK(relative_error(low.policy->forward(small_tokens()).to(torch::kFloat32),
                         wide.policy->forward(small_tokens())) < 1e-2);
  }

  const auto batch = small_batch();
  for (int step = 0; step < 2; ++step) {
    CHECK(low_learner.step(batch).policy_updated);
    CHECK(wide_learner.step(batch).policy_updated);
  }
  const auto low_adapters = sao::model::lora_tensors(*low.policy);
  const auto wide_adapters = sao::model::lora_tensors(*wide.policy);
  REQUIRE(low_adapters.size() == 6);
  std::vector<torch::Tensor> low_moves, wide_moves;
  for (size_t i = 0; i < low_adapters.size(); ++i) {
    CAPTURE(low_adapters[i].first);
    CHECK((low_adapters[i].second.scalar_type() == torch::kFloat32));
    CHECK_FALSE(torch::equal(low_adapters[i].second, before[low_adapters[i].first]));
    low_moves.push_back((low_adapters[i].second - before[low_adapters[i].first]).flatten());
    wide_moves.push_back((wide_adapters[i].second - before[low_adapters[i].first]).flatten());
  }
  // The same updates to bf16's precision: AdamW's first steps are near
  // sign(gradient), so compare the directions and the resulting functions.
  const auto low_move = torch::cat(low_moves), wide_move = torch::cat(wide_moves);
  const double cosine = (low_move.dot(wide_move) / (low_move.norm() * wide_move.norm())).item<double>();
  MESSAGE("bf16 base vs fp32 base after 2 steps: update cosine " << cosine);
  CHECK(cosine > 0.9);
  {
    torch::NoGradGuard no_grad;
    const double gap =
        relative_error(low.policy->forward(small_tokens()).to(torch::kFloat32), wide.policy->forward(small_tokens()));
    MESSAGE("bf16 base vs fp32 base after 2 steps: logits relative error " << gap);
    CHECK(gap < 1e-2);
  }
  for (const auto& item : low.policy->named_parameters()) {
    if (!sao::model::is_lora_tensor_name(item.key())) CHECK(torch::equal(item.value(), before[item.key()]));
  }
  // Moments for the fp32 adapters and the critic, as with an fp32 base.
  CHECK(low_learner.optimizer_state_bytes() == wide_learner.optimizer_state_bytes());

  // What weight sync sends: every tensor as fp32, the base exactly its bf16 values.
  const auto sent = sao::model::named_tensors_as_fp32(*low.policy);
  const auto held = sao::model::named_tensors_of(*low.policy);
  REQUIRE(sent.size() == held.size());
  for (size_t i = 0; i < sent.size(); ++i) {
    CHECK((sent[i].second.scalar_type() == torch::kFloat32));
    CHECK(torch::equal(sent[i].second, held[i].second.to(torch::kFloat32)));
  }
  for (const auto& entry : sao::model::pack_tensors(sent).index) CHECK(entry.dtype == "F32");

  // A checkpoint stores the base as bf16 and loads back bit-exactly.
  const auto dir = temp_dir("bf16_base");
  sao::model::save_policy_checkpoint(dir.string(), low.policy, {{"tokenizer", "byte"}});
  CHECK((sao::model::load_safetensors((dir / "model.safetensors").string())
             .tensors.at("model.embed_tokens.weight")
             .scalar_type() == torch::kBFloat16));
  auto loaded = sao::model::load_policy_checkpoint(dir.string());
  sao::model::store_frozen_base_as(loaded, torch::kBFloat16);
  const auto loaded_tensors = sao::model::named_tensors_of(*loaded);
  REQUIRE(loaded_tensors.size() == held.size());
  for (size_t i = 0; i < held.size(); ++i) {
    CAPTURE(held[i].first);
    CHECK(loaded_tensors[i].first == held[i].first);
    CHECK(torch::equal(loaded_tensors[i].second, held[i].second));
  }
  fs::remove_all(dir);
}

TEST_CASE("the learner's memory estimate counts gradients and AdamW moments of the adapters only") {
  auto config = sao_test::tiny_config();
  sao::algo::LearnerConfig learner;
  const auto full = sao::train::estimate_learner_rank_memory(config, /*critic=*/true, 1024, learner);
  config.lora = lora_of(4, 8.0, sao::model::lora_projection_names());
  const auto adapted = sao::train::estimate_learner_rank_memory(config, /*critic=*/true, 1024, learner);
  const int64_t p = config.parameter_count(), l = config.lora_parameter_count();
  // Full: weights 2P, gradients 2P, moments 4P. LoRA: weights 2P + L,
  // gradients L + P, moments 2(L + P). Float32 bytes.
  CHECK(full.bytes - adapted.bytes == 4 * (3 * p - 4 * l));
  // A base kept in bf16: 2 bytes a base parameter fewer.
  learner.lora_base_dtype = "bf16";
  const auto halved = sao::train::estimate_learner_rank_memory(config, /*critic=*/true, 1024, learner);
  CHECK(adapted.bytes - halved.bytes == 2 * p);
}
