// HfTokenizer on two tiny tokenizer.json files built here: a byte-level BPE
// (GPT-2 style) and a sentencepiece-style BPE with byte fallback. Every
// expected id list below was produced by Hugging Face's JavaScript
// tokenizers (tests/parity/hf_tokenizer_reference.cjs) on the same files;
// the real files are compared string by string in test_parity_tokenizer.
// Then the errors: each unsupported or malformed part is refused by name.
#include "base/error.hpp"
#include "test_tiny_tokenizer.hpp"
#include "tokenizer/hf_tokenizer.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace {

using sao::tokenizer::HfTokenizer;
using sao_test::byte_level_json;
using sao_test::sentencepiece_json;
using Ids = std::vector<int64_t>;

HfTokenizer tokenizer_from(const nlohmann::json& json, const std::string& config = "") {
  return HfTokenizer::from_json_text(json.dump(), config, "tiny");
}

std::string error_of(const nlohmann::json& json) {
  try {
    tokenizer_from(json);
  } catch (const sao::Error& error) {
    return error.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("byte-level BPE: merges by rank, leftmost first, added tokens matched before BPE") {
  const auto tokenizer = tokenizer_from(byte_level_json(), R"({"eos_token": "<|special|>"})");
  CHECK(tokenizer.encode("hello") == Ids{259});  // l+l, h+e, he+ll, hell+o
  CHECK(tokenizer.encode("hellx") == Ids{258, 120});
  CHECK(tokenizer.encode("aaa") == Ids{260, 97});    // the leftmost pair of equal rank merges
  CHECK(tokenizer.encode(" wow") == Ids{262, 119});  // the space is byte 0x20's stand-in U+0120
  CHECK(tokenizer.encode("12ab") == Ids{49, 50, 97, 98});
  CHECK(tokenizer.encode("\xC3\xA9") == Ids{195, 169});  // é: two bytes, no merge
  CHECK(tokenizer.encode_with_special_tokens("a<|special|>b") == Ids{97, 300, 98});
  // lstrip/rstrip: the spaces around the added token go with it.
  CHECK(tokenizer.encode_with_special_tokens("x <tool> y") == Ids{120, 301, 121});
  CHECK(tokenizer.encode("x <tool> y") == Ids{120, 301, 121});  // not special: matched by the safe encode too
  CHECK(tokenizer.decode({120, 301, 121}) == "x<tool>y");
  CHECK(tokenizer.decode({97, 300, 98}) == "a<|special|>b");
  CHECK(tokenizer.decode({97, 300, 98}, true) == "ab");
  CHECK(tokenizer.eos_id() == 300);
  CHECK(tokenizer.bos_id() == -1);
  CHECK(tokenizer.is_special(300));
  CHECK_FALSE(tokenizer.is_special(301));
  CHECK(tokenizer.special_id("<tool>") == 301);
  CHECK(tokenizer.vocab_size() == 302);
}

TEST_CASE("the safe encode spells special-token text as text, so user text cannot forge it") {
  const auto tokenizer = tokenizer_from(byte_level_json());
  const auto ids = tokenizer.encode("a<|special|>b");
  CHECK(std::find(ids.begin(), ids.end(), 300) == ids.end());
  CHECK(tokenizer.decode(ids) == "a<|special|>b");
}

TEST_CASE("invalid UTF-8 is read as U+FFFD per maximal subpart before encoding") {
  const auto tokenizer = tokenizer_from(byte_level_json());
  // "\xE2\x82" is one truncated sequence: one U+FFFD (EF BF BD), as
  // TextDecoder and Rust's from_utf8_lossy read it.
  CHECK(tokenizer.encode("a\xE2\x82") == Ids{97, 239, 191, 189});
  CHECK(tokenizer.decode(tokenizer.encode("a\xE2\x82")) == "a\xEF\xBF\xBD");
}

TEST_CASE("sentencepiece-style BPE: prepended word marker, byte fallback, decoder chain") {
  const auto tokenizer = tokenizer_from(sentencepiece_json());
  CHECK(tokenizer.encode("a \xC3\xA9") == Ids{260, 257, 196, 170});  // é is not in the vocabulary: its bytes
  CHECK(tokenizer.encode("ab a") == Ids{260, 259, 260});             // rank 0 "▁ a" takes the a before "a b" can
  CHECK(tokenizer.encode("b") == Ids{257, 259});
  CHECK(tokenizer.encode("a  b") == Ids{260, 257, 257, 259});
  CHECK(tokenizer.decode({260, 257, 196, 170}) == "a \xC3\xA9");
  CHECK(tokenizer.decode({196}) == "\xEF\xBF\xBD");  // a lone lead byte decodes to U+FFFD
}

TEST_CASE("tokenizer.json errors name the key") {
  auto with = [](nlohmann::json json, const std::function<void(nlohmann::json&)>& change) {
    change(json);
    return error_of(json);
  };
  CHECK(with(byte_level_json(), [](auto& j) { j["model"]["type"] = "Unigram"; }) ==
        "tiny/tokenizer.json: model.type: model 'Unigram' is not supported (supported: BPE)");
  CHECK(with(byte_level_json(), [](auto& j) { j["model"]["merges"][1] = "h q"; }) ==
        "tiny/tokenizer.json: model.merges[1]: a token of the merge or its result is not in the vocabulary");
  CHECK(with(byte_level_json(), [](auto& j) { j["model"]["merges"][0] = "l l l"; }) ==
        "tiny/tokenizer.json: model.merges[0]: expected \"left right\" (two tokens, one space)");
  CHECK(with(byte_level_json(),
             [](auto& j) {
               j["normalizer"] = {{"type", "Lowercase"}};
             }) ==
        "tiny/tokenizer.json: normalizer.type: normalizer 'Lowercase' is not supported (supported: Sequence, NFC, "
        "NFD, NFKC, NFKD, Prepend, Replace)");
  CHECK(with(byte_level_json(), [](auto& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Contiguous"; }) ==
        "tiny/tokenizer.json: pre_tokenizer.pretokenizers[0].behavior: 'Contiguous' is not supported (supported: "
        "Isolated, Removed)");
  CHECK(with(byte_level_json(), [](auto& j) { j["added_tokens"][0]["single_word"] = true; }) ==
        "tiny/tokenizer.json: added_tokens[0].single_word: true is not supported");
  CHECK(with(byte_level_json(), [](auto& j) {
          j["decoder"] = {{"type", "WordPiece"}};
        }).find("tiny/tokenizer.json: decoder.type: decoder 'WordPiece' is not supported") == 0);
  const auto bad_regex =
      with(byte_level_json(), [](auto& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(\\p{L}"; });
  CHECK(bad_regex.find("tiny/tokenizer.json: pre_tokenizer.pretokenizers[0].pattern.Regex: the pattern does not "
                       "compile (PCRE2 at offset") == 0);
  CHECK(with(byte_level_json(), [](auto& j) { j.erase("model"); }) == "tiny/tokenizer.json: missing key 'model'");
  CHECK_THROWS_WITH_AS(HfTokenizer::from_json_text("{", "", "tiny"), doctest::Contains("tiny/tokenizer.json"),
                       sao::Error);
  CHECK_THROWS_WITH_AS(tokenizer_from(byte_level_json(), R"({"eos_token": "<nope>"})"),
                       "tiny/tokenizer_config.json.eos_token: token \"<nope>\" is not in the vocabulary", sao::Error);
}

TEST_CASE("decode refuses ids outside the vocabulary; load refuses a directory without tokenizer.json") {
  const auto tokenizer = tokenizer_from(byte_level_json());
  CHECK_THROWS_WITH_AS(tokenizer.decode({1, 302}), "decode: id 302 is outside the vocabulary [0, 302)", sao::Error);
  CHECK_THROWS_WITH_AS(tokenizer.decode({-1}), "decode: id -1 is outside the vocabulary [0, 302)", sao::Error);
  const auto dir = std::filesystem::temp_directory_path() / ("sao_test_hf_tok_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  CHECK_THROWS_WITH_AS(HfTokenizer::load(dir.string()),
                       (dir.string() + ": no tokenizer.json (a Hugging Face model directory has one)").c_str(),
                       sao::Error);
  std::ofstream(dir / "tokenizer.json") << byte_level_json().dump();
  CHECK(HfTokenizer::load(dir.string()).encode("hello") == Ids{259});
  std::filesystem::remove_all(dir);
}

// A tokenizer.json is a program from a model directory too (issue 47):
// a pipeline may grow its input at most 64-fold (+ 4096 bytes) and nest
// Sequences 16 deep, with at most 256 components.
TEST_CASE("normalizer, pre-tokenizer and decoder pipelines are bounded in growth and in nesting") {
  const nlohmann::json doubling = {{"type", "Replace"}, {"pattern", {{"String", "a"}}}, {"content", "aa"}};
  const std::string growth = " (the limit is 64 x the input + 4096)";
  auto normalizer_chain = sentencepiece_json();
  normalizer_chain["normalizer"] = {{"type", "Sequence"}, {"normalizers", std::vector<nlohmann::json>(30, doubling)}};
  CHECK_THROWS_WITH_AS(
      tokenizer_from(normalizer_chain).encode("a"),
      ("tiny/tokenizer.json: normalizer.normalizers[12]: the text grows past 4160 bytes from 1" + growth).c_str(),
      sao::Error);

  auto byte_levels = byte_level_json();
  byte_levels["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       std::vector<nlohmann::json>(
           20, {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}})}};  // doubles non-ASCII
  CHECK_THROWS_WITH_AS(
      tokenizer_from(byte_levels).encode("\xC3\xA9"),
      ("tiny/tokenizer.json: pre_tokenizer.pretokenizers[11]: the text grows past 4224 bytes from 2" + growth).c_str(),
      sao::Error);

  auto metaspace = byte_level_json();
  metaspace["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", std::string(5000, 'x')}, {"prepend_scheme", "never"}, {"split", false}};
  CHECK_THROWS_WITH_AS(tokenizer_from(metaspace).encode("a b"),
                       ("tiny/tokenizer.json: pre_tokenizer: the text grows past 4288 bytes from 3" + growth).c_str(),
                       sao::Error);

  auto decoder_chain = sentencepiece_json();
  decoder_chain["decoder"] = {{"type", "Sequence"}, {"decoders", std::vector<nlohmann::json>(30, doubling)}};
  CHECK_THROWS_WITH_AS(
      tokenizer_from(decoder_chain).decode({258}),
      ("tiny/tokenizer.json: decoder.decoders[12]: the text grows past 4160 bytes from 1" + growth).c_str(),
      sao::Error);

  nlohmann::json nested = {{"type", "NFC"}};
  std::string where = "tiny/tokenizer.json: normalizer";
  for (int i = 0; i < 17; ++i) nested = {{"type", "Sequence"}, {"normalizers", {nested}}};
  for (int i = 0; i < 16; ++i) where += ".normalizers[0]";
  auto deep = sentencepiece_json();
  deep["normalizer"] = nested;
  CHECK(error_of(deep) == where + ": Sequences nest deeper than 16");

  auto wide = sentencepiece_json();
  wide["normalizer"] = {{"type", "Sequence"}, {"normalizers", std::vector<nlohmann::json>(300, {{"type", "NFC"}})}};
  CHECK(error_of(wide) ==
        "tiny/tokenizer.json: normalizer.normalizers[255]: the pipeline has more than 256 components");

  // Within the bounds, a chain that doubles four times works.
  auto short_chain = sentencepiece_json();
  short_chain["normalizer"] = {{"type", "Sequence"}, {"normalizers", std::vector<nlohmann::json>(4, doubling)}};
  CHECK(tokenizer_from(short_chain).encode("a") == Ids(16, 258));
}
