// LoRA adapters: tensors, init, merge, PEFT files; see lora.hpp.
#include "model/lora.hpp"

#include "base/error.hpp"
#include "base/json_parse.hpp"
#include "model/regular_file.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

namespace sao::model {

namespace {
namespace fs = std::filesystem;

// adapter_config.json is a few hundred bytes; this bounds what is read of a hostile one.
constexpr std::uint64_t kMaxAdapterConfigBytes = 1024 * 1024;

// Every (projection, adapter) pair of the policy, in layer order.
template <typename Visit>
void for_each_adapter(CausalLM& policy, Visit visit) {
  for (const auto& layer_module : *policy->model->layers) {
    auto* layer = layer_module->as<DecoderLayerImpl>();
    auto& attention = *layer->self_attn;
    auto& mlp = *layer->mlp;
    for (auto* pair : {&attention.q_lora, &attention.k_lora, &attention.v_lora, &attention.o_lora, &mlp.gate_lora,
                       &mlp.up_lora, &mlp.down_lora}) {
      if (*pair) visit(*pair);
    }
  }
}

std::map<std::string, torch::Tensor> lora_parameters_by_name(CausalLM& policy) {
  std::map<std::string, torch::Tensor> named;
  for (const auto& item : policy->named_parameters(/*recurse=*/true))
    if (is_lora_tensor_name(item.key())) named[item.key()] = item.value();
  return named;
}
}  // namespace

NamedTensors lora_tensors(const torch::nn::Module& module) {
  NamedTensors out;
  for (auto& item : named_tensors_of(module))
    if (is_lora_tensor_name(item.first)) out.push_back(std::move(item));
  return out;
}

NamedTensors base_tensors(const torch::nn::Module& module) {
  NamedTensors out;
  for (auto& item : named_tensors_of(module))
    if (!is_lora_tensor_name(item.first)) out.push_back(std::move(item));
  return out;
}

void store_frozen_base_as(CausalLM& policy, torch::ScalarType dtype) {
  torch::NoGradGuard no_grad;
  for (auto& parameter : policy->parameters()) {
    if (!parameter.requires_grad() && parameter.scalar_type() != dtype)
      parameter.set_data(parameter.detach().to(dtype));
  }
}

bool has_low_precision_tensors(const torch::nn::Module& module) {
  for (const auto& parameter : module.parameters()) {
    if (parameter.scalar_type() != torch::kFloat32) return true;
  }
  return false;
}

NamedTensors named_tensors_as_fp32(const torch::nn::Module& module) {
  NamedTensors out;
  for (auto& [name, tensor] : named_tensors_of(module)) {
    out.emplace_back(name, tensor.scalar_type() == torch::kFloat32 ? tensor : tensor.detach().to(torch::kFloat32));
  }
  return out;
}

void init_lora(CausalLM& policy, uint64_t seed) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  torch::NoGradGuard no_grad;
  for_each_adapter(policy, [&](LoraPath& path) {
    auto& a = path.a->weight;
    // Kaiming-uniform with a = sqrt(5), PEFT's default for A: bound 1/sqrt(fan_in).
    const double bound = 1.0 / std::sqrt(static_cast<double>(a.size(1)));
    auto values = torch::empty(a.sizes(), torch::kFloat32);
    values.uniform_(-bound, bound, generator);
    a.copy_(values);
    path.b->weight.zero_();
  });
}

CausalLM merge_lora(const CausalLM& policy) {
  auto config = policy->config();
  const auto lora = config.lora;
  config.lora = LoraConfig{};
  CausalLM merged(config);
  torch::NoGradGuard no_grad;
  auto targets = merged->named_parameters(/*recurse=*/true);
  const auto sources = policy->named_parameters(/*recurse=*/true);
  for (const auto& item : sources) {
    if (is_lora_tensor_name(item.key())) continue;
    targets[item.key()].copy_(item.value());
  }
  if (!lora.enabled()) return merged;
  for (const auto& item : sources) {
    const auto& name = item.key();
    const auto at = name.find(".lora_A.weight");
    if (at == std::string::npos) continue;
    const auto projection = name.substr(0, at);
    const auto& a = item.value();
    const auto& b = sources[projection + ".lora_B.weight"];
    auto& weight = targets[projection + ".weight"];
    // In float64, so the merged weights are the adapted ones rounded once.
    const auto delta = torch::matmul(b.to(torch::kFloat64), a.to(torch::kFloat64)) * lora.scaling();
    weight.copy_((weight.to(torch::kFloat64) + delta.to(weight.device())).to(weight.scalar_type()));
  }
  return merged;
}

void write_peft_adapter(const std::string& dir, const CausalLM& policy, const std::string& base_model) {
  const auto& lora = policy->config().lora;
  if (!lora.enabled()) throw Error("write_peft_adapter: the policy has no LoRA adapters");
  NamedTensors tensors;
  for (auto& [name, tensor] : lora_tensors(*policy))
    tensors.emplace_back(kPeftTensorPrefix + name, tensor.to(torch::kCPU).contiguous());
  save_safetensors((fs::path(dir) / kPeftWeightsFile).string(), tensors, {{"format", "pt"}});
  const auto path = fs::path(dir) / kPeftConfigFile;
  std::ofstream out(path);
  out << peft_adapter_config_json(lora, base_model).dump(2) << "\n";
  if (!out) throw Error("cannot write " + path.string());
}

bool has_peft_adapter(const std::string& dir) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(fs::path(dir) / kPeftConfigFile, ec));
}

LoraConfig read_peft_adapter_config(const std::string& dir) {
  const auto path = (fs::path(dir) / kPeftConfigFile).string();
  const auto json = base::parse_json_limited(read_regular_file(path, kMaxAdapterConfigBytes), path);
  return lora_config_from_peft_json(json, path);
}

void load_peft_adapter(CausalLM& policy, const std::string& dir) {
  const auto lora = read_peft_adapter_config(dir);
  const auto path = (fs::path(dir) / kPeftWeightsFile).string();
  if (policy->config().lora.enabled()) throw Error(path + ": the policy has LoRA adapters already");
  // Names and shapes first, from the header alone: nothing is allocated for
  // a file that is not exactly these adapters.
  auto expected_config = policy->config();
  expected_config.lora = lora;
  std::map<std::string, std::vector<int64_t>> expected;
  for (const auto& [name, shape] : policy_tensor_shapes(expected_config))
    if (is_lora_tensor_name(name)) expected[kPeftTensorPrefix + name] = shape;
  const auto header = read_safetensors_header(path);
  for (const auto& [name, info] : header.tensors) {
    const auto it = expected.find(name);
    if (it == expected.end())
      throw Error(path + ": tensor '" + name + "' is not an adapter of this model with " + kPeftConfigFile +
                  "'s targets (expected names like '" + expected.begin()->first + "')");
    if (info.shape != it->second)
      throw Error(path + ": tensor '" + name + "' has the wrong shape for r = " + std::to_string(lora.rank));
  }
  for (const auto& item : expected) {
    if (header.tensors.count(item.first) == 0) throw Error(path + ": tensor '" + item.first + "' is missing");
  }
  const auto file = load_safetensors(path);
  policy->attach_lora(lora);
  auto parameters = lora_parameters_by_name(policy);
  torch::NoGradGuard no_grad;
  for (const auto& [name, tensor] : file.tensors) {
    auto& target = parameters.at(name.substr(std::string(kPeftTensorPrefix).size()));
    target.copy_(tensor.to(target.scalar_type()));
  }
}

}  // namespace sao::model
