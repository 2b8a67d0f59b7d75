// Inspection of a Hugging Face model directory; see model_directory.hpp.
#include "config/model_directory.hpp"

#include "base/error.hpp"
#include "base/json_parse.hpp"
#include "model/checkpoint.hpp"
#include "model/model_config.hpp"
#include "model/regular_file.hpp"
#include "model/safetensors.hpp"
#include "model/weight_files.hpp"
#include "tokenizer/byte_tokenizer_files.hpp"
#include "tokenizer/chat_tokenizer.hpp"
#include "tokenizer/hf_tokenizer.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

namespace sao::config {

namespace {

namespace fs = std::filesystem;
constexpr std::uint64_t kMaxSmallJsonBytes = 16ull * 1024 * 1024;

std::string format(const char* pattern, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), pattern, value);
  return text;
}

std::string gigabytes(double bytes) {
  return format("%.2f GB", bytes / 1e9);
}

nlohmann::json read_json(const fs::path& path) {
  return base::parse_json_limited(model::read_regular_file(path.string(), kMaxSmallJsonBytes), path.string());
}

ModelDirectoryPart inspect_manifest(const fs::path& dir) {
  ModelDirectoryPart part{"MANIFEST.json", true, {}};
  try {
    const auto checked = model::verify_checkpoint_files(dir.string());
    part.lines.push_back(checked == 0 ? std::string("none (not written by sao): no file is checked for corruption")
                                      : std::to_string(checked) +
                                            " listed files have their recorded sizes and FNV-1a checksums");
  } catch (const std::exception& error) {
    part.usable = false;
    part.lines.push_back(std::string("error: ") + error.what());
  }
  return part;
}

ModelDirectoryPart inspect_config(const fs::path& dir) {
  ModelDirectoryPart part{"config.json", true, {}};
  try {
    auto json = read_json(dir / "config.json");
    std::string architecture = json.contains("model_type") ? base::dump_json(json["model_type"]) : "(no model_type)";
    if (json.contains("architectures") && json["architectures"].is_array() && !json["architectures"].empty())
      architecture += " " + base::dump_json(json["architectures"][0]);
    part.lines.push_back("architecture " + architecture);
    const auto problems = model::unsupported_hf_config_keys(json);
    // The sizes are worth showing even for a layout sao cannot compute yet.
    if (!problems.empty() && json.is_object()) {
      json["model_type"] = "llama";
      json.erase("rope_scaling");
    }
    const auto config =
        model::model_config_from_json(json, (dir / "config.json").string(), model::ConfigKind::kHuggingFace);
    part.lines.push_back(
        "layers " + std::to_string(config.num_hidden_layers) + ", hidden " + std::to_string(config.hidden_size) +
        ", intermediate " + std::to_string(config.intermediate_size) + ", heads " +
        std::to_string(config.num_attention_heads) + " (" + std::to_string(config.num_key_value_heads) +
        " key/value), vocab " + std::to_string(config.vocab_size) + ", positions " +
        std::to_string(config.max_position_embeddings));
    part.lines.push_back(std::string("tied embeddings ") + (config.tie_word_embeddings ? "yes" : "no") +
                         ", attention bias " + (config.attention_bias ? "yes" : "no") +
                         format(", rope_theta %g", config.rope_theta));
    part.lines.push_back("parameters " + std::to_string(config.parameter_count()) + " (" +
                         gigabytes(4.0 * static_cast<double>(config.parameter_count())) +
                         " as fp32, what sao computes in on the CPU)");
    for (const auto& problem : problems) {
      part.usable = false;
      part.lines.push_back("error: config.json " + problem);
    }
  } catch (const std::exception& error) {
    part.usable = false;
    part.lines.push_back(std::string("error: ") + error.what());
  }
  return part;
}

ModelDirectoryPart inspect_weights(const fs::path& dir) {
  ModelDirectoryPart part{"weights", true, {}};
  try {
    const auto weights = model::read_weight_files(dir.string());
    part.lines.push_back(weights.sharded ? "sharded: " + std::to_string(weights.files.size()) +
                                               " files (model.safetensors.index.json)"
                                         : std::string("single file model.safetensors"));
    std::map<std::string, int64_t> count_by_dtype;
    int64_t parameters = 0;
    for (const auto& [name, info] : weights.header.tensors) {
      int64_t elements = 1;
      for (const auto size : info.shape) elements *= size;
      parameters += elements;
      count_by_dtype[model::safetensors_dtype_name(info.dtype)] += 1;
    }
    std::string dtypes;
    for (const auto& [dtype, count] : count_by_dtype)
      dtypes += (dtypes.empty() ? "" : ", ") + dtype + " x" + std::to_string(count);
    part.lines.push_back(std::to_string(weights.header.tensors.size()) + " tensors (" + dtypes + "), " +
                         std::to_string(parameters) + " values, " +
                         gigabytes(static_cast<double>(weights.bytes_on_disk)) + " on disk, " +
                         gigabytes(4.0 * static_cast<double>(parameters)) + " as fp32");
  } catch (const std::exception& error) {
    part.usable = false;
    part.lines.push_back(std::string("error: ") + error.what());
  }
  return part;
}

std::string token_or_none(const tokenizer::HfTokenizer& tokenizer, int64_t id) {
  return id < 0 ? std::string("none") : "\"" + tokenizer.token(id) + "\" (" + std::to_string(id) + ")";
}

ModelDirectoryPart inspect_tokenizer(const fs::path& dir) {
  ModelDirectoryPart part{"tokenizer", true, {}};
  try {
    const auto tokenizer = tokenizer::HfTokenizer::load(dir.string());
    int64_t specials = 0;
    for (int64_t id = 0; id < tokenizer.vocab_size(); ++id) specials += tokenizer.is_special(id);
    part.lines.push_back("tokenizer.json: " + std::to_string(tokenizer.vocab_size()) + " ids, " +
                         std::to_string(specials) + " special");
    part.lines.push_back("bos " + token_or_none(tokenizer, tokenizer.bos_id()) + ", eos " +
                         token_or_none(tokenizer, tokenizer.eos_id()) + ", pad " +
                         token_or_none(tokenizer, tokenizer.pad_id()));
    const std::string sample = "Hello, world! 123";
    const auto ids = tokenizer.encode(sample);
    std::string listed;
    for (const auto id : ids) listed += (listed.empty() ? "" : " ") + std::to_string(id);
    part.lines.push_back("\"" + sample + "\" -> " + listed + " -> \"" + tokenizer.decode(ids) + "\"");
    if (tokenizer::is_byte_tokenizer_directory(dir.string()))
      part.lines.push_back(
          "sao's byte tokenizer: runs use it as such (every byte string, invalid UTF-8 included, "
          "encodes to its bytes)");
    if (fs::exists(dir / "config.json")) {
      const auto config = read_json(dir / "config.json");
      if (config.contains("vocab_size") && config["vocab_size"].is_number_integer() &&
          config["vocab_size"].get<int64_t>() < tokenizer.vocab_size()) {
        part.usable = false;
        part.lines.push_back("error: the tokenizer has " + std::to_string(tokenizer.vocab_size()) +
                             " ids but config.json's vocab_size is " +
                             std::to_string(config["vocab_size"].get<int64_t>()));
      }
    }
  } catch (const std::exception& error) {
    part.usable = false;
    part.lines.push_back(std::string("error: ") + error.what());
  }
  return part;
}

ModelDirectoryPart inspect_chat_template(const fs::path& dir) {
  ModelDirectoryPart part{"chat template", true, {}};
  try {
    // chat_template.jinja, when present, is what runs use (load_chat_template).
    std::error_code ec;
    if (fs::exists(fs::symlink_status(dir / "chat_template.jinja", ec))) {
      part.lines.push_back("chat_template.jinja");
    } else {
      if (!fs::exists(dir / "tokenizer_config.json")) {
        part.lines.push_back("none (no tokenizer_config.json)");
        return part;
      }
      const auto config = read_json(dir / "tokenizer_config.json");
      if (!config.contains("chat_template") || config["chat_template"].is_null()) {
        part.lines.push_back("none in tokenizer_config.json (a base model: prompts are plain text)");
        return part;
      }
      const auto& value = config["chat_template"];
      if (value.is_string()) {
        part.lines.push_back("tokenizer_config.json chat_template, " + std::to_string(value.get<std::string>().size()) +
                             " characters");
      } else if (value.is_array()) {
        std::string names;
        for (const auto& entry : value) {
          if (entry.is_object() && entry.contains("name") && entry["name"].is_string())
            names += (names.empty() ? "" : ", ") + entry["name"].get<std::string>();
        }
        part.lines.push_back("tokenizer_config.json chat_template: named templates " + names);
      } else {
        throw Error((dir / "tokenizer_config.json").string() + ": chat_template: expected a string or a list");
      }
    }
    // Parsing and one rendered turn show whether sao can use it as it stands.
    auto chat_template = tokenizer::load_chat_template(dir.string());
    if (chat_template) {
      const tokenizer::ChatTokenizer chat(
          std::make_shared<const tokenizer::HfTokenizer>(tokenizer::HfTokenizer::load(dir.string())),
          std::move(*chat_template), dir.string());
      part.lines.push_back("renders in sao; end of turn \"" + chat.decode({chat.end_of_turn_id()}) + "\" (" +
                           std::to_string(chat.end_of_turn_id()) +
                           "); runs use it unless model.prompt_format is plain");
    }
  } catch (const std::exception& error) {
    part.usable = false;
    part.lines.push_back(std::string("error: ") + error.what());
  }
  return part;
}

ModelDirectoryPart inspect_generation(const fs::path& dir) {
  ModelDirectoryPart part{"generation_config.json", true, {}};
  try {
    if (!fs::exists(dir / "generation_config.json")) {
      part.lines.push_back("none (stop at the tokenizer's eos)");
      return part;
    }
    const auto json = read_json(dir / "generation_config.json");
    if (!json.is_object()) throw Error((dir / "generation_config.json").string() + ": expected a JSON object");
    std::string settings;
    for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id", "temperature", "top_p", "top_k"}) {
      if (json.contains(key))
        settings += std::string(settings.empty() ? "" : ", ") + key + " " + base::dump_json(json[key]);
    }
    part.lines.push_back(settings.empty() ? "no stop or sampling settings" : settings);
  } catch (const std::exception& error) {
    part.usable = false;
    part.lines.push_back(std::string("error: ") + error.what());
  }
  return part;
}

}  // namespace

bool ModelDirectoryReport::usable() const {
  for (const auto& part : parts) {
    if (!part.usable) return false;
  }
  return !parts.empty();
}

ModelDirectoryReport inspect_model_directory(const std::string& directory) {
  ModelDirectoryReport report;
  report.directory = directory;
  const fs::path dir(directory);
  std::error_code error;
  if (!fs::is_directory(dir, error)) {
    report.parts.push_back({"directory", false, {"error: " + directory + " is not a directory"}});
    return report;
  }
  report.parts.push_back(inspect_manifest(dir));
  report.parts.push_back(inspect_config(dir));
  report.parts.push_back(inspect_weights(dir));
  report.parts.push_back(inspect_tokenizer(dir));
  report.parts.push_back(inspect_chat_template(dir));
  report.parts.push_back(inspect_generation(dir));
  return report;
}

}  // namespace sao::config
