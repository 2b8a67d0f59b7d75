// `sao export CHECKPOINT --out DIR`: a sao checkpoint as a Hugging Face model
// directory (a LoRA checkpoint's adapters merged in), or with --adapter a
// LoRA checkpoint's adapters alone as a PEFT adapter directory. The tokenizer files come from the model directory the
// run was started from (recorded in the checkpoint's sao.json) or --tokenizer-from; a byte-level run gets the byte
// tokenizer written as tokenizer.json.
#include "app/commands.hpp"

#include "app/args.hpp"
#include "app/common.hpp"
#include "base/error.hpp"
#include "model/checkpoint.hpp"
#include "model/hf_export.hpp"
#include "model/lora.hpp"
#include "tokenizer/byte_tokenizer.hpp"
#include "tokenizer/byte_tokenizer_files.hpp"
#include "tokenizer/hf_tokenizer.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>

namespace sao::cli {

namespace {
namespace fs = std::filesystem;

// What transformers reads a tokenizer and its generation settings from.
constexpr const char* kTokenizerFiles[] = {"tokenizer.json",
                                           "tokenizer_config.json",
                                           "special_tokens_map.json",
                                           "generation_config.json",
                                           "chat_template.jinja",
                                           "vocab.json",
                                           "merges.txt",
                                           "tokenizer.model"};

// The byte tokenizer's files (tokenizer/byte_tokenizer_files.hpp), written
// into the export's staging folder so they get manifest entries too.
void add_byte_tokenizer_files(model::HfExportOptions* options) {
  options->generated_files["tokenizer.json"] = tokenizer::byte_tokenizer_json();
  options->generated_files["tokenizer_config.json"] = tokenizer::byte_tokenizer_config_json();
  options->generation_config = tokenizer::generation_config_json(tokenizer::ByteTokenizer());
}
}  // namespace

int run_export(const Args& args) {
  const std::vector<FlagSpec> specs = {
      {"--out", true, false, "directory to write (replaced whole if it exists)"},
      {"--dtype", true, false, "dtype of the weights on disk: fp32 (default), bf16 or fp16"},
      {"--shard-size-mb", true, false, "shard the weights above this many MB (default 5000, as save_pretrained)"},
      {"--tokenizer-from", true, false, "copy tokenizer files from this directory (default: the run's model.path)"},
      {"--adapter", false, false,
       "LoRA checkpoints: write the adapters alone in PEFT's layout (adapter_config.json + "
       "adapter_model.safetensors) instead of merging them into the weights"},
      {"--help", false, false, "show this help"}};
  const auto parsed = parse_args("export", specs, args);
  if (parsed.has("--help")) {
    std::printf("usage: sao export CHECKPOINT_DIR --out DIR [options]\n%s", flags_help(specs).c_str());
    return 0;
  }
  if (parsed.positional.size() != 1) throw Error("expected one checkpoint directory (see sao export --help)");
  if (!parsed.has("--out")) throw Error("--out DIR is required");
  const auto& checkpoint = parsed.positional[0];
  nlohmann::json info;
  const auto loaded = model::load_policy_checkpoint(checkpoint, &info);
  const auto& lora = loaded->config().lora;
  const auto& out = parsed.get("--out");
  if (parsed.has("--adapter")) {
    if (!lora.enabled())
      throw Error("export: " + checkpoint + " has no LoRA adapters (no " + model::kPeftConfigFile +
                  "); export it without --adapter");
    const auto base = info.value("tokenizer", nlohmann::json("byte"));
    const std::string base_model = base.is_string() && base != "byte" ? base.get<std::string>() : "";
    model::write_directory_atomically(
        out, [&](const std::string& staging) { model::write_peft_adapter(staging, loaded, base_model); });
    std::printf(
        "export: wrote %s: LoRA adapters in PEFT's layout (r=%lld, alpha=%g, %zu target projection(s), %zu "
        "tensors) for the base %s\n",
        out.c_str(), static_cast<long long>(lora.rank), lora.alpha, lora.targets.size(),
        model::lora_tensors(*loaded).size(), base_model.empty() ? "(none recorded)" : base_model.c_str());
    return 0;
  }
  // A LoRA checkpoint exports as one plain model: W + alpha/r B A in every target.
  const auto policy = lora.enabled() ? model::merge_lora(loaded) : loaded;

  model::HfExportOptions options;
  options.dtype = model::export_dtype_from_name(parsed.get("--dtype", "fp32"));
  const auto shard_mb = parsed.get_int("--shard-size-mb", 5000);
  if (shard_mb < 1 || shard_mb > 1000000) throw Error("--shard-size-mb must be in [1, 1000000]");
  options.max_shard_bytes = static_cast<std::uint64_t>(shard_mb) * 1000 * 1000;
  std::string tokenizer_dir = parsed.get("--tokenizer-from");
  if (tokenizer_dir.empty() && info.contains("tokenizer") && info["tokenizer"].is_string() &&
      info["tokenizer"] != "byte")
    tokenizer_dir = info["tokenizer"].get<std::string>();
  const bool byte_tokenizer = tokenizer_dir.empty() && info.value("tokenizer", nlohmann::json()) == "byte";
  if (byte_tokenizer) {
    add_byte_tokenizer_files(&options);
  } else if (tokenizer_dir.empty()) {
    std::fprintf(stderr,
                 "export: %s names no tokenizer (no sao.json with a \"tokenizer\"); no tokenizer files written "
                 "(name a directory with --tokenizer-from)\n",
                 checkpoint.c_str());
  } else {
    for (const char* name : kTokenizerFiles) {
      const auto path = fs::path(tokenizer_dir) / name;
      if (fs::is_regular_file(path)) options.copy_files.push_back(path.string());
    }
    if (!fs::is_regular_file(fs::path(tokenizer_dir) / "tokenizer.json"))
      throw Error("export: " + tokenizer_dir + " has no tokenizer.json to copy");
    if (!fs::is_regular_file(fs::path(tokenizer_dir) / "generation_config.json"))
      options.generation_config = tokenizer::generation_config_json(tokenizer::HfTokenizer::load(tokenizer_dir));
  }
  // A run that capped a brought model's context exports the directory's
  // own context, so the model keeps what it was built for.
  auto exported = policy;
  if (!tokenizer_dir.empty() && fs::is_regular_file(fs::path(tokenizer_dir) / "config.json")) {
    model::ModelConfig source;
    try {
      source = model::load_checkpoint_config(tokenizer_dir);
    } catch (const std::exception&) {
      source = policy->config();  // tokenizer files of a model sao cannot build: nothing to restore
    }
    if (source.max_position_embeddings > policy->config().max_position_embeddings)
      exported = with_context(policy, source.max_position_embeddings);
  }
  const auto report = model::export_hf_directory(exported, out, options);
  const std::string tokenizer_files = byte_tokenizer
                                          ? std::string("sao's byte tokenizer as tokenizer.json")
                                          : std::to_string(options.copy_files.size()) + " tokenizer file(s) copied";
  std::printf("export: wrote %s: %zu weight file(s), %.1f MB of %s weights, %s\n", out.c_str(),
              report.weight_files.size(), static_cast<double>(report.weight_bytes) / 1e6,
              parsed.get("--dtype", "fp32").c_str(), tokenizer_files.c_str());
  return 0;
}

}  // namespace sao::cli
