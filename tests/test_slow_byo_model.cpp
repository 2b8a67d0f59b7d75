// Bring your own model, end to end through the CLI: a Hugging Face
// directory (Qwen3 layout with q/k norm and a head_dim apart from
// hidden/heads, bf16 weights in shards, a tokenizer.json BPE with its
// tokenizer_config.json) is the model of `sao train --model DIR`; the run's
// checkpoint goes back out through `sao export` and loads as the same model.
#include "model/checkpoint.hpp"
#include "model/hf_export.hpp"
#include "model/transformer.hpp"
#include "test_process_helpers.hpp"
#include "test_tiny_run.hpp"
#include "test_tiny_tokenizer.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace {

namespace fs = std::filesystem;

sao::model::ModelConfig qwen3_tiny() {
  sao::model::ModelConfig config;
  config.model_type = "qwen3";
  config.vocab_size = 320;  // the tokenizer's 302 ids, padded as real models pad theirs
  config.hidden_size = 32;
  config.intermediate_size = 64;
  config.num_hidden_layers = 1;
  config.num_attention_heads = 2;
  config.num_key_value_heads = 1;
  config.explicit_head_dim = 24;
  config.max_position_embeddings = 64;
  config.tie_word_embeddings = true;
  return config;
}

// A model directory as a user brings it: weights sharded in bf16, tokenizer files beside.
void write_model_directory(const fs::path& dir) {
  sao::model::CausalLM policy(qwen3_tiny());
  sao::model::init_weights(*policy, 3);
  sao::model::HfExportOptions options;
  options.dtype = torch::kBFloat16;
  options.max_shard_bytes = 8000;
  sao::model::export_hf_directory(policy, dir.string(), options);
  std::ofstream(dir / "tokenizer.json") << sao_test::byte_level_json().dump();
  // A chat template: the runs below go through chat turns (model.prompt_format "auto").
  const nlohmann::json config = {{"eos_token", "<|special|>"},
                                 {"bos_token", nullptr},
                                 {"chat_template",
                                  "{% for m in messages %}<{{ m.role }}>{{ m.content }}<|special|>{% endfor %}"
                                  "{% if add_generation_prompt %}<assistant>{% endif %}"}};
  std::ofstream(dir / "tokenizer_config.json") << config.dump();
}

const std::string kSmallRun =
    " --set sft.steps=4 --set sft.batch_size=4 --set task.min_digits=1 --set task.max_digits=1"
    " --set task.test_size=8 --set eval.max_new_tokens=4 --set rollout.max_new_tokens=4"
    " --set rollout.slots=4 --set replay.min_batch=4 --set replay.max_batch=4"
    " --set console.enabled=false --set train.steps=3";

}  // namespace

TEST_CASE("sao train --model DIR trains a sharded bf16 Hugging Face directory; sao export round-trips it") {
  const fs::path base = fs::temp_directory_path() / ("sao_test_byo_model_" + std::to_string(::getpid()));
  fs::remove_all(base);
  const auto model_dir = base / "Qwen3-tiny";
  write_model_directory(model_dir);
  REQUIRE(fs::exists(model_dir / "model.safetensors.index.json"));

  const auto doctor =
      sao_test::run_command(std::string(SAO_BINARY) + " doctor --model " + sao_test::quoted(model_dir.string()));
  INFO(doctor.output);
  CHECK(doctor.exit_code == 0);
  CHECK(doctor.output.find("BF16") != std::string::npos);
  CHECK(doctor.output.find("renders in sao; end of turn \"<|special|>\" (300)") != std::string::npos);

  const auto run_dir = base / "run";
  const auto train =
      sao_test::run_command(std::string(SAO_BINARY) + " train --model " + sao_test::quoted(model_dir.string()) +
                            " --run-dir " + sao_test::quoted(run_dir.string()) + kSmallRun);
  INFO(train.output);
  REQUIRE(train.exit_code == 0);
  CHECK(sao_test::step_numbers(run_dir) == sao_test::one_to(3));
  const auto resolved = nlohmann::json::parse(sao_test::read_text(run_dir / "config.json"));
  CHECK(resolved["model"] == nlohmann::json({{"path", model_dir.string()}}));
  const auto policy_dir = run_dir / "checkpoint" / "policy";
  const auto info = nlohmann::json::parse(sao_test::read_text(policy_dir / "sao.json"));
  CHECK(info["tokenizer"] == model_dir.string());

  // The trained policy keeps the directory's architecture.
  torch::NoGradGuard no_grad;
  auto trained = sao::model::load_policy_checkpoint(policy_dir.string());
  CHECK(trained->config().model_type == "qwen3");
  CHECK(trained->config().head_dim() == 24);

  const auto exported = base / "exported";
  const auto export_run =
      sao_test::run_command(std::string(SAO_BINARY) + " export " + sao_test::quoted(policy_dir.string()) + " --out " +
                            sao_test::quoted(exported.string()));
  INFO(export_run.output);
  REQUIRE(export_run.exit_code == 0);
  for (const char* name :
       {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"})
    CHECK_MESSAGE(fs::exists(exported / name), name);
  const auto generation = nlohmann::json::parse(sao_test::read_text(exported / "generation_config.json"));
  CHECK(generation["eos_token_id"] == 300);
  CHECK_FALSE(generation.contains("bos_token_id"));
  const auto config = nlohmann::json::parse(sao_test::read_text(exported / "config.json"));
  CHECK(config["architectures"] == nlohmann::json::array({"Qwen3ForCausalLM"}));
  CHECK(config["head_dim"] == 24);
  auto reloaded = sao::model::load_policy_checkpoint(exported.string());
  trained->eval();
  reloaded->eval();
  const auto ids = torch::tensor({5, 17, 300, 42, 7}, torch::kInt64).view({1, 5});
  CHECK(torch::equal(reloaded->forward(ids), trained->forward(ids)));
  fs::remove_all(base);
}

TEST_CASE("with --model the architecture comes from the directory: a disagreeing key is named") {
  const fs::path base = fs::temp_directory_path() / ("sao_test_byo_model_keys_" + std::to_string(::getpid()));
  fs::remove_all(base);
  const auto model_dir = base / "model";
  write_model_directory(model_dir);
  const auto result = sao_test::run_command(std::string(SAO_BINARY) + " sft --model " +
                                            sao_test::quoted(model_dir.string()) + " --set model.hidden_size=64");
  CHECK(result.exit_code != 0);
  CHECK(result.output.find("model.hidden_size is 64 but " + model_dir.string() + "/config.json says 32") !=
        std::string::npos);
  const auto missing =
      sao_test::run_command(std::string(SAO_BINARY) + " sft --model " + sao_test::quoted((base / "nowhere").string()));
  CHECK(missing.exit_code != 0);
  CHECK(missing.output.find("model.path " + (base / "nowhere").string() + ": no such directory") != std::string::npos);
  // max_position_embeddings may cap the context (as a serving engine's
  // max_model_len), never extend it.
  const auto longer =
      sao_test::run_command(std::string(SAO_BINARY) + " sft --model " + sao_test::quoted(model_dir.string()) +
                            " --set model.max_position_embeddings=128");
  CHECK(longer.exit_code != 0);
  CHECK(longer.output.find("model.max_position_embeddings is 128 but " + model_dir.string() +
                           "/config.json says 64 (with model.path it may cap the context at a positive integer up "
                           "to that, not extend it)") != std::string::npos);
  const auto capped_dir = base / "capped";
  const auto capped = sao_test::run_command(
      std::string(SAO_BINARY) + " sft --model " + sao_test::quoted(model_dir.string()) + " --run-dir " +
      sao_test::quoted(capped_dir.string()) + " --set model.max_position_embeddings=32" + kSmallRun);
  INFO(capped.output);
  REQUIRE(capped.exit_code == 0);
  const auto capped_config = sao::model::load_checkpoint_config((capped_dir / "sft").string());
  CHECK(capped_config.max_position_embeddings == 32);
  CHECK(capped_config.hidden_size == 32);
  // Export gives the model back its directory's context.
  const auto capped_export =
      sao_test::run_command(std::string(SAO_BINARY) + " export " + sao_test::quoted((capped_dir / "sft").string()) +
                            " --out " + sao_test::quoted((base / "capped_export").string()));
  INFO(capped_export.output);
  REQUIRE(capped_export.exit_code == 0);
  CHECK(sao::model::load_checkpoint_config((base / "capped_export").string()).max_position_embeddings == 64);
  fs::remove(model_dir / "tokenizer.json");
  const auto no_tokenizer =
      sao_test::run_command(std::string(SAO_BINARY) + " sft --model " + sao_test::quoted(model_dir.string()));
  CHECK(no_tokenizer.exit_code != 0);
  CHECK(no_tokenizer.output.find("tokenizer.json") != std::string::npos);
  fs::remove_all(base);
}
