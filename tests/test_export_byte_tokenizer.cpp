// `sao export` of a byte-level run writes the byte tokenizer as Hugging Face
// files (tokenizer.json, tokenizer_config.json, generation_config.json), so
// the exported directory is usable by `sao doctor --model`, loads with
// `--model` as the byte tokenizer itself (the same ids for every byte
// string, invalid UTF-8 included), and its tokenizer.json, read as any
// tokenizer.json is, encodes text to the same ids. The npm reference's side
// is in test_parity_tokenizer.
#include "base/utf8.hpp"
#include "config/run_config.hpp"
#include "model/checkpoint.hpp"
#include "test_checkpoint_fixtures.hpp"
#include "test_process_helpers.hpp"
#include "tokenizer/byte_tokenizer.hpp"
#include "tokenizer/byte_tokenizer_files.hpp"
#include "tokenizer/hf_tokenizer.hpp"
#include "tokenizer/load_tokenizer.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using sao::tokenizer::ByteTokenizer;

namespace {

// Every byte value (alone and all together), invalid UTF-8 (lone
// continuation bytes, truncated and overlong sequences, surrogates, bytes
// past U+10FFFF), NUL, special tokens' text, and ordinary text.
std::vector<std::string> byte_strings() {
  std::vector<std::string> strings = {"", "Hello, world! 123", "12+34=46", "naïve café 日本語 😀", "\n\t \r\n"};
  std::string all_bytes;
  for (int byte = 0; byte < 256; ++byte) {
    strings.emplace_back(1, static_cast<char>(byte));
    all_bytes += static_cast<char>(byte);
  }
  strings.push_back(all_bytes);
  strings.push_back(std::string(all_bytes.rbegin(), all_bytes.rend()));
  for (const char* invalid : {"\x80", "a\xBFz", "\xC3", "\xE2\x82", "\xF0\x9F\x98", "\xC0\xAF", "\xED\xA0\x80",
                              "\xF4\x90\x80\x80", "\xFF\xFE", "ok\xC3(", "\xE2\x28\xA1"})
    strings.emplace_back(invalid);
  strings.emplace_back("with\0nul", 8);
  for (int64_t id = ByteTokenizer::kNumBytes; id < ByteTokenizer::kVocabSize; ++id)
    strings.push_back("x" + std::string(ByteTokenizer::special_name(id)) + "y");
  return strings;
}

struct ByteExport {
  fs::path base = sao_test::fresh_dir("byte_export_", "run");
  fs::path checkpoint = base / "sft";
  fs::path exported = base / "exported";
  ByteExport() {
    CHECK(sao_test::save_and_export_byte_run(checkpoint, exported, 3).find("sao's byte tokenizer as tokenizer.json") !=
          std::string::npos);
  }
  ~ByteExport() { fs::remove_all(base); }
};

}  // namespace

TEST_CASE("an exported byte-level run has tokenizer files and sao doctor --model calls it usable") {
  const ByteExport run;
  CHECK(nlohmann::json::parse(sao_test::read_text(run.exported / "tokenizer.json")) ==
        sao::tokenizer::byte_tokenizer_json());
  CHECK(nlohmann::json::parse(sao_test::read_text(run.exported / "tokenizer_config.json")) ==
        nlohmann::json{{"tokenizer_class", "PreTrainedTokenizerFast"},
                       {"bos_token", "<|bos|>"},
                       {"eos_token", "<|eos|>"},
                       {"pad_token", "<|pad|>"},
                       {"clean_up_tokenization_spaces", false}});
  CHECK(nlohmann::json::parse(sao_test::read_text(run.exported / "generation_config.json")) ==
        nlohmann::json{{"do_sample", true},
                       {"temperature", 1.0},
                       {"top_p", 1.0},
                       {"top_k", 0},
                       {"bos_token_id", 257},
                       {"eos_token_id", 258},
                       {"pad_token_id", 256}});
  const auto doctor =
      sao_test::run_command(std::string(SAO_BINARY) + " doctor --model " + sao_test::quoted(run.exported.string()));
  INFO(doctor.output);
  CHECK(doctor.exit_code == 0);
  CHECK(doctor.output.find("tokenizer              ok\n  tokenizer.json: 264 ids, 8 special\n"
                           "  bos \"<|bos|>\" (257), eos \"<|eos|>\" (258), pad \"<|pad|>\" (256)\n") !=
        std::string::npos);
  CHECK(doctor.output.find("  sao's byte tokenizer: runs use it as such") != std::string::npos);
  CHECK(doctor.output.find("MANIFEST.json          ok\n  5 listed files have their recorded sizes") !=
        std::string::npos);
  CHECK(doctor.output.find("verdict                every part above is readable by sao") != std::string::npos);
}

TEST_CASE("--model on an exported byte-level run gives the byte tokenizer's ids for every byte string") {
  const ByteExport run;
  // What --model DIR does: model.path, then the run's tokenizer from it.
  const auto config =
      sao::config::load_run_config("", {"model={\"path\": " + nlohmann::json(run.exported.string()).dump() + "}"});
  CHECK(config.model_path == run.exported.string());
  const auto loaded = sao::tokenizer::load_tokenizer(config.model_path, config.prompt_format);
  REQUIRE(dynamic_cast<const ByteTokenizer*>(loaded.get()) != nullptr);
  const ByteTokenizer bytes;
  const auto as_hf = sao::tokenizer::HfTokenizer::load(run.exported.string());
  CHECK(as_hf.vocab_size() == bytes.vocab_size());
  CHECK(as_hf.bos_id() == bytes.bos_id());
  CHECK(as_hf.eos_id() == bytes.eos_id());
  CHECK(as_hf.pad_id() == bytes.pad_id());
  for (const auto& text : byte_strings()) {
    CAPTURE(text);
    const auto ids = bytes.encode(text);
    CHECK(loaded->encode(text) == ids);
    CHECK(loaded->decode(ids) == text);
    // The same file read as any tokenizer.json: where the text is valid
    // UTF-8 (what the HF libraries take) it encodes to the same ids and
    // decodes back; invalid UTF-8 is read as U+FFFD first, as they do.
    const auto valid = sao::base::replace_invalid_utf8(text);
    CHECK(as_hf.encode(text) == bytes.encode(valid));
    CHECK(as_hf.decode(bytes.encode(valid)) == valid);
  }
  // Special tokens: their text is text to both (the safe encode), and their ids decode alike.
  for (int64_t id = ByteTokenizer::kNumBytes; id < ByteTokenizer::kVocabSize; ++id) {
    CHECK(as_hf.decode({id}) == bytes.decode({id}));
    CHECK(as_hf.decode({65, id}, true) == bytes.decode({65, id}, true));
    CHECK(as_hf.is_special(id));
  }
}

TEST_CASE("a tokenizer.json that differs from the byte tokenizer's in any way is read as a tokenizer.json") {
  const auto dir = sao_test::fresh_dir("byte_export_", "edited");
  fs::create_directories(dir);
  auto edited = sao::tokenizer::byte_tokenizer_json();
  std::ofstream(dir / "tokenizer.json") << edited.dump();
  CHECK(sao::tokenizer::is_byte_tokenizer_directory(dir.string()));
  std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": [258, 263]})";
  CHECK_FALSE(sao::tokenizer::is_byte_tokenizer_directory(dir.string()));  // another stop id: not the byte tokenizer
  fs::remove(dir / "generation_config.json");
  std::ofstream(dir / "tokenizer_config.json") << R"({"eos_token": "<|sep|>"})";
  CHECK_FALSE(sao::tokenizer::is_byte_tokenizer_directory(dir.string()));
  fs::remove(dir / "tokenizer_config.json");
  edited["pre_tokenizer"]["use_regex"] = true;  // still a byte-level BPE, but not the file export writes
  std::ofstream(dir / "tokenizer.json") << edited.dump();
  CHECK_FALSE(sao::tokenizer::is_byte_tokenizer_directory(dir.string()));
  CHECK(dynamic_cast<const ByteTokenizer*>(sao::tokenizer::load_tokenizer(dir.string()).get()) == nullptr);
  fs::remove_all(dir);
}
