// The byte tokenizer's Hugging Face files; see byte_tokenizer_files.hpp.
#include "tokenizer/byte_tokenizer_files.hpp"

#include "base/json_parse.hpp"
#include "base/small_file.hpp"
#include "tokenizer/byte_tokenizer.hpp"
#include "tokenizer/hf_tokenizer.hpp"

#include <cstdint>
#include <filesystem>
#include <optional>

namespace sao::tokenizer {

namespace {
// The byte tokenizer's tokenizer.json is about 6 KB; a larger file is some
// other tokenizer and is not read twice to find that out.
constexpr std::uintmax_t kMaxByteTokenizerFileBytes = 64 * 1024;

// The parsed file when it exists and is small enough to be one of ours.
std::optional<nlohmann::json> small_json_file(const std::filesystem::path& path) {
  std::error_code error;
  if (!std::filesystem::exists(std::filesystem::symlink_status(path, error))) return std::nullopt;
  const auto size = std::filesystem::file_size(path, error);
  if (error || size > kMaxByteTokenizerFileBytes) return nlohmann::json();
  return base::parse_json_limited(base::read_small_file(path), path.string());
}
}  // namespace

nlohmann::json byte_tokenizer_json() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int byte = 0; byte < ByteTokenizer::kNumBytes; ++byte) vocab[byte_level_char(static_cast<uint8_t>(byte))] = byte;
  nlohmann::json added = nlohmann::json::array();
  for (int64_t id = ByteTokenizer::kNumBytes; id < ByteTokenizer::kVocabSize; ++id) {
    added.push_back({{"id", id},
                     {"content", std::string(ByteTokenizer::special_name(id))},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  const nlohmann::json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}};
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", byte_level},
          {"post_processor", nullptr},
          {"decoder", byte_level},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", false},
            {"vocab", vocab},
            {"merges", nlohmann::json::array()}}}};
}

nlohmann::json byte_tokenizer_config_json() {
  const ByteTokenizer bytes;
  return {{"tokenizer_class", "PreTrainedTokenizerFast"},
          {"bos_token", std::string(ByteTokenizer::special_name(bytes.bos_id()))},
          {"eos_token", std::string(ByteTokenizer::special_name(bytes.eos_id()))},
          {"pad_token", std::string(ByteTokenizer::special_name(bytes.pad_id()))},
          {"clean_up_tokenization_spaces", false}};
}

nlohmann::json generation_config_json(const Tokenizer& tokenizer) {
  nlohmann::json config = {{"do_sample", true}, {"temperature", 1.0}, {"top_p", 1.0}, {"top_k", 0}};
  if (tokenizer.bos_id() >= 0) config["bos_token_id"] = tokenizer.bos_id();
  if (tokenizer.eos_id() >= 0) config["eos_token_id"] = tokenizer.eos_id();
  if (tokenizer.pad_id() >= 0) config["pad_token_id"] = tokenizer.pad_id();
  return config;
}

bool is_byte_tokenizer_directory(const std::string& model_directory) {
  const std::filesystem::path dir(model_directory);
  const auto tokenizer_json = small_json_file(dir / "tokenizer.json");
  if (!tokenizer_json || *tokenizer_json != byte_tokenizer_json()) return false;
  const auto config = small_json_file(dir / "tokenizer_config.json");
  if (config && *config != byte_tokenizer_config_json()) return false;
  const auto generation = small_json_file(dir / "generation_config.json");
  if (!generation) return true;
  // Anything else the HfTokenizer reader judges (and names what is wrong).
  if (!generation->is_object()) return false;
  if (!generation->contains("eos_token_id")) return true;
  const auto& eos = generation->at("eos_token_id");
  return eos == ByteTokenizer::kEos || eos == nlohmann::json::array({ByteTokenizer::kEos});
}

}  // namespace sao::tokenizer
