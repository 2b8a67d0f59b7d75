// LoRA against an independent reference: tests/parity/hf_model_reference.py
// reads a PEFT adapter directory as PeftModel.from_pretrained does
// (adapter_config.json's r, lora_alpha and target_modules; the
// "base_model.model.*.lora_A/lora_B.weight" tensors; W x + alpha/r B A x)
// on top of the base directory, in float64. For a random base (Qwen2, with
// q/k/v biases, and Llama) and random non-zero adapters:
//   - the checkpoint sao writes (base in model.safetensors, adapters in
//     PEFT's layout beside it) gives the reference the logits sao computes;
//   - `sao export --adapter` writes a directory the reference reads the
//     same way, on the base directory the run started from;
//   - `sao export` (merged) is a plain model with the same logits.
// Numbers go to BUILD/artifacts/parity_lora.json.
#include "model/checkpoint.hpp"
#include "model/lora.hpp"
#include "model/safetensors.hpp"
#include "model/transformer.hpp"
#include "test_process_helpers.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace {

namespace fs = std::filesystem;

std::string python() {
  return fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
}

const std::string kReference = std::string(SAO_SOURCE_DIR) + "/tests/parity/hf_model_reference.py";

fs::path work_dir() {
  static const fs::path dir = fs::temp_directory_path() / ("sao_parity_lora_" + std::to_string(::getpid()));
  return dir;
}

void run_reference(const std::string& arguments) {
  const auto result = sao_test::run_command(python() + " " + sao_test::quoted(kReference) + " " + arguments);
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
}

torch::Tensor reference_logits(const fs::path& model_dir, const fs::path& adapter_dir,
                               const std::vector<std::vector<int64_t>>& ids) {
  const auto ids_path = work_dir() / "ids.json";
  const auto out_path = work_dir() / "logits.safetensors";
  std::ofstream(ids_path) << nlohmann::json(ids).dump();
  std::string arguments = "forward " + sao_test::quoted(model_dir.string()) + " " +
                          sao_test::quoted(ids_path.string()) + " " + sao_test::quoted(out_path.string());
  if (!adapter_dir.empty()) arguments += " --adapter " + sao_test::quoted(adapter_dir.string());
  run_reference(arguments);
  return sao::model::load_safetensors(out_path.string()).tensors.at("logits");
}

double relative_error(const torch::Tensor& got, const torch::Tensor& want) {
  const auto want64 = want.to(torch::kFloat64);
  return (got.to(torch::kFloat64) - want64).abs().max().item<double>() / want64.abs().max().item<double>();
}

// Adapters far from their initialisation (B is zero there, which would hide
// a transposed or misnamed B).
void randomize_adapters(sao::model::CausalLM& policy, uint64_t seed) {
  torch::manual_seed(seed);
  torch::NoGradGuard no_grad;
  for (auto& [name, tensor] : sao::model::lora_tensors(*policy)) tensor.copy_(torch::randn_like(tensor) * 0.2);
}

}  // namespace

TEST_CASE("LoRA checkpoints and PEFT exports give the independent PEFT reader sao's logits") {
  const auto check = sao_test::run_command(python() + " -c 'import torch'");
  REQUIRE_MESSAGE(check.exit_code == 0, "needs Debian's python3-torch (deploy/install-deps.sh --tests)");
  fs::remove_all(work_dir());
  fs::create_directories(work_dir());
  nlohmann::json numbers;
  const std::vector<std::vector<int64_t>> ids = {{1, 5, 9, 44, 7, 300, 12, 3, 8, 19},
                                                 {2, 2, 17, 90, 250, 4, 61, 5, 6, 7}};
  const auto input =
      torch::tensor(std::vector<int64_t>{1, 5, 9, 44, 7, 300, 12, 3, 8, 19, 2, 2, 17, 90, 250, 4, 61, 5, 6, 7})
          .view({2, 10});
  struct Case {
    const char* layout;
    int64_t rank;
    double alpha;
    std::vector<std::string> targets;
  };
  for (const auto& item :
       {Case{"qwen2", 4, 8.0, {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}},
        Case{"llama", 2, 3.0, {"q_proj", "v_proj", "down_proj"}}}) {
    CAPTURE(item.layout);
    const auto base_dir = work_dir() / (std::string(item.layout) + "_base");
    run_reference("make " + sao_test::quoted(base_dir.string()) + " --layout " + item.layout +
                  " --dtype fp32 --seed 3 --vocab 320");
    auto policy = sao::model::load_policy_checkpoint(base_dir.string());
    sao::model::LoraConfig lora;
    lora.rank = item.rank;
    lora.alpha = item.alpha;
    lora.targets = item.targets;
    policy->attach_lora(lora);
    randomize_adapters(policy, 11);
    policy->eval();
    torch::NoGradGuard no_grad;
    const auto got = policy->forward(input);

    // The checkpoint: base and adapters in one directory.
    const auto checkpoint = work_dir() / (std::string(item.layout) + "_checkpoint");
    // (A byte-tokenizer run: the random base directory has no tokenizer files to export.)
    sao::model::save_policy_checkpoint(checkpoint.string(), policy, {{"tokenizer", "byte"}});
    const auto want = reference_logits(checkpoint, checkpoint, ids);
    const double checkpoint_error = relative_error(got, want);
    CHECK(checkpoint_error < 1e-5);
    // The adapters matter: without them the reference's logits are another model's.
    CHECK(relative_error(got, reference_logits(checkpoint, {}, ids)) > 1e-2);
    auto reloaded = sao::model::load_policy_checkpoint(checkpoint.string());
    CHECK(reloaded->config().lora == lora);
    CHECK(torch::equal(reloaded->forward(input), got));

    // `sao export --adapter`: the adapters alone, read on the base directory.
    const auto adapter_dir = work_dir() / (std::string(item.layout) + "_adapter");
    const auto exported =
        sao_test::run_command(std::string(SAO_BINARY) + " export " + sao_test::quoted(checkpoint.string()) +
                              " --adapter --out " + sao_test::quoted(adapter_dir.string()));
    INFO(exported.output);
    REQUIRE(exported.exit_code == 0);
    CHECK(fs::exists(adapter_dir / "adapter_config.json"));
    CHECK(!fs::exists(adapter_dir / "model.safetensors"));
    const auto config = nlohmann::json::parse(std::ifstream(adapter_dir / "adapter_config.json"));
    CHECK(config.at("peft_type") == "LORA");
    CHECK(config.at("r") == item.rank);
    const double adapter_error = relative_error(got, reference_logits(base_dir, adapter_dir, ids));
    CHECK(adapter_error < 1e-5);

    // `sao export`: merged into a plain model directory.
    const auto merged_dir = work_dir() / (std::string(item.layout) + "_merged");
    const auto merged =
        sao_test::run_command(std::string(SAO_BINARY) + " export " + sao_test::quoted(checkpoint.string()) + " --out " +
                              sao_test::quoted(merged_dir.string()));
    INFO(merged.output);
    REQUIRE(merged.exit_code == 0);
    CHECK(!fs::exists(merged_dir / "adapter_config.json"));
    const double merged_error = relative_error(got, reference_logits(merged_dir, {}, ids));
    CHECK(merged_error < 1e-5);
    numbers[item.layout] = {{"checkpoint_vs_reference", checkpoint_error},
                            {"adapter_export_vs_reference", adapter_error},
                            {"merged_export_vs_reference", merged_error}};
  }
  fs::create_directories(SAO_ARTIFACT_DIR);
  std::ofstream(std::string(SAO_ARTIFACT_DIR) + "/parity_lora.json") << numbers.dump(2) << "\n";
  fs::remove_all(work_dir());
}
