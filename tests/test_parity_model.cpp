// Model parity with an independent reference: tests/parity/hf_model_reference.py
// implements the Llama, Mistral, Qwen2 and Qwen3 forward passes from the
// Hugging Face modelling definitions in float64 (Debian's python3-torch)
// and reads and writes safetensors by hand. For each layout it writes a
// random-weight model directory as save_pretrained lays it out (bf16, fp16
// or fp32; sharded through model.safetensors.index.json or one file), and:
//   - sao loads it and its float32 logits match the reference's within 1e-4
//     of the largest logit;
//   - sao's KV-cache decode gives its full forward's logits;
//   - `sao export`'s directory (sharded) loads in the reference with the
//     same logits, and back in sao bit for bit.
// Numbers go to BUILD/artifacts/parity_model.json.
#include "model/checkpoint.hpp"
#include "model/hf_export.hpp"
#include "model/paged_kv.hpp"
#include "model/safetensors.hpp"
#include "model/transformer.hpp"
#include "test_process_helpers.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

namespace {

namespace fs = std::filesystem;

std::string python() {
  // Debian's interpreter, where python3-torch is installed, even when a
  // pyenv or venv python3 comes first on PATH.
  return fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
}

const std::string kReference = std::string(SAO_SOURCE_DIR) + "/tests/parity/hf_model_reference.py";

void require_reference() {
  const auto result = sao_test::run_command(python() + " -c 'import torch'");
  INFO(result.output);
  REQUIRE_MESSAGE(result.exit_code == 0,
                  "the model parity test needs Debian's python3-torch (deploy/install-deps.sh --tests installs it)");
}

fs::path work_dir() {
  static const fs::path dir = fs::temp_directory_path() / ("sao_parity_model_" + std::to_string(::getpid()));
  return dir;
}

void run_reference(const std::string& arguments) {
  const auto result = sao_test::run_command(python() + " " + sao_test::quoted(kReference) + " " + arguments);
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
}

torch::Tensor reference_logits(const fs::path& model_dir, const std::vector<std::vector<int64_t>>& ids) {
  const auto ids_path = work_dir() / "ids.json";
  const auto out_path = work_dir() / "logits.safetensors";
  std::ofstream(ids_path) << nlohmann::json(ids).dump();
  run_reference("forward " + sao_test::quoted(model_dir.string()) + " " + sao_test::quoted(ids_path.string()) + " " +
                sao_test::quoted(out_path.string()));
  return sao::model::load_safetensors(out_path.string()).tensors.at("logits");
}

torch::Tensor to_tensor(const std::vector<std::vector<int64_t>>& ids) {
  std::vector<int64_t> flat;
  for (const auto& row : ids) flat.insert(flat.end(), row.begin(), row.end());
  return torch::tensor(flat, torch::kInt64).view({static_cast<int64_t>(ids.size()), -1});
}

double relative_error(const torch::Tensor& got, const torch::Tensor& want) {
  const auto want64 = want.to(torch::kFloat64);
  return (got.to(torch::kFloat64) - want64).abs().max().item<double>() / want64.abs().max().item<double>();
}

// Prompt of 8 tokens in one call, then one token per call, through the
// paged KV cache: the rollout's path. Blocks of 4 tokens taken row by row in
// turn, so every row's blocks are scattered through the pool.
torch::Tensor cached_logits(sao::model::CausalLM& policy, const torch::Tensor& ids) {
  const int64_t rows = ids.size(0), length = ids.size(1), block_size = 4;
  sao::model::KVBlockPool pool(policy->config(), rows * length, block_size);
  std::vector<std::vector<int64_t>> blocks(static_cast<size_t>(rows));
  for (int64_t b = 0; b < pool.blocks_for(length); ++b) {
    for (auto& row_blocks : blocks) REQUIRE(pool.take(1, row_blocks));
  }
  const auto token = [&](int64_t r, int64_t t) { return ids[r][t].item<int64_t>(); };
  std::vector<torch::Tensor> steps;
  const int64_t prompt = 8;
  const auto run = [&](int64_t begin, int64_t count) {
    std::vector<sao::model::PagedRow> call;
    for (int64_t r = 0; r < rows; ++r) {
      sao::model::PagedRow row{&blocks[static_cast<size_t>(r)], begin, {}};
      for (int64_t t = begin; t < begin + count; ++t) row.fresh.push_back(token(r, t));
      call.push_back(row);
    }
    // Flattened [rows * count, V], row by row.
    steps.push_back(policy->logits_from_hidden(sao::model::forward_paged(policy->model, pool, call)).view({rows, count, -1}));
  };
  run(0, prompt);
  for (int64_t t = prompt; t < length; ++t) run(t, 1);
  return torch::cat(steps, 1);
}

struct Layout {
  const char* name;
  const char* dtype;
  int shards;
};

}  // namespace

TEST_CASE("logits of every supported layout match the independent reference; export round-trips") {
  require_reference();
  fs::remove_all(work_dir());
  fs::create_directories(work_dir());
  torch::NoGradGuard no_grad;
  nlohmann::json artifact = nlohmann::json::object();
  const Layout layouts[] = {
      {"llama3", "bf16", 3}, {"llama", "fp32", 1}, {"mistral", "fp16", 2}, {"qwen2", "bf16", 1}, {"qwen3", "bf16", 3}};
  for (const auto& layout : layouts) {
    CAPTURE(layout.name);
    const auto dir = work_dir() / layout.name;
    run_reference("make " + sao_test::quoted(dir.string()) + " --layout " + layout.name + " --dtype " + layout.dtype +
                  " --shards " + std::to_string(layout.shards) + " --seed 11 --vocab 320");
    auto policy = sao::model::load_policy_checkpoint(dir.string());
    policy->eval();
    CHECK(policy->config().model_type == (std::string(layout.name) == "llama3" ? "llama" : layout.name));

    // Two rows of 40 tokens: longer than llama3's original context of 16,
    // so all three of its frequency bands are exercised.
    std::mt19937 random(5);
    std::vector<std::vector<int64_t>> ids(2, std::vector<int64_t>(40));
    for (auto& row : ids)
      for (auto& id : row) id = static_cast<int64_t>(random() % 320);
    const auto input = to_tensor(ids);
    const auto logits = policy->forward(input);
    const auto want = reference_logits(dir, ids);
    REQUIRE(logits.sizes() == want.sizes());
    const double forward_error = relative_error(logits, want);
    CHECK(forward_error < 1e-4);

    const double cache_error = relative_error(cached_logits(policy, input), logits);
    CHECK(cache_error < 1e-5);

    // Export sharded (a shard limit far below the model's size) and in
    // fp32, which holds the loaded bf16/fp16 values exactly.
    const auto exported = work_dir() / (std::string(layout.name) + "_export");
    sao::model::HfExportOptions options;
    options.max_shard_bytes = 40000;
    const auto report = sao::model::export_hf_directory(policy, exported.string(), options);
    CHECK(report.weight_files.size() > 1);
    CHECK(fs::exists(exported / "model.safetensors.index.json"));
    const double export_error = relative_error(reference_logits(exported, ids), want);
    CHECK(export_error < 1e-12);
    auto reloaded = sao::model::load_policy_checkpoint(exported.string());
    reloaded->eval();
    CHECK(torch::equal(reloaded->forward(input), logits));

    // bf16 export: the reference reads what sao wrote in the other dtype.
    const auto exported_bf16 = work_dir() / (std::string(layout.name) + "_export_bf16");
    options.dtype = torch::kBFloat16;
    options.max_shard_bytes = 5'000'000'000ull;
    sao::model::export_hf_directory(policy, exported_bf16.string(), options);
    const auto bf16_config = nlohmann::json::parse(sao_test::read_text(exported_bf16 / "config.json"));
    CHECK(bf16_config["torch_dtype"] == "bfloat16");
    auto reloaded_bf16 = sao::model::load_policy_checkpoint(exported_bf16.string());
    reloaded_bf16->eval();
    const double bf16_error = relative_error(reloaded_bf16->forward(input), reference_logits(exported_bf16, ids));
    CHECK(bf16_error < 1e-4);

    artifact[layout.name] = {{"dtype", layout.dtype},
                             {"shards", layout.shards},
                             {"forward_relative_error", forward_error},
                             {"kv_cache_relative_error", cache_error},
                             {"fp32_export_relative_error", export_error},
                             {"bf16_export_relative_error", bf16_error},
                             {"export_files", report.weight_files.size()}};
  }
  fs::create_directories(SAO_ARTIFACT_DIR);
  std::ofstream(fs::path(SAO_ARTIFACT_DIR) / "parity_model.json") << artifact.dump(2) << "\n";
  MESSAGE(artifact.dump());
  fs::remove_all(work_dir());
}
