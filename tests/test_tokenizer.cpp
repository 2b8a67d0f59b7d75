// Byte tokenizer tests. Why so much round-tripping: everything the model sees
// and says passes through encode/decode, so a single lost or mangled byte
// (NUL, 0xFF, half a UTF-8 sequence) would silently corrupt rewards.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "tokenizer/byte_tokenizer.hpp"

using sao::tokenizer::ByteTokenizer;
using sao::tokenizer::Tokenizer;

TEST_CASE("all 256 byte values round trip and map to their own id") {
  ByteTokenizer tok;
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const std::vector<int64_t> ids = tok.encode(all);
  REQUIRE(ids.size() == 256);
  for (int b = 0; b < 256; ++b) CHECK(ids[static_cast<size_t>(b)] == b);
  CHECK(tok.decode(ids) == all);
}

TEST_CASE("random byte strings with NUL and invalid UTF-8 round trip") {
  ByteTokenizer tok;
  std::mt19937_64 rng(1234);
  for (int trial = 0; trial < 500; ++trial) {
    std::string text(rng() % 200, '\0');
    for (char& c : text) c = static_cast<char>(rng() & 0xFF);
    const auto ids = tok.encode(text);
    for (int64_t id : ids) CHECK_FALSE(tok.is_special(id));
    CHECK(tok.decode(ids) == text);
  }
  const std::string tricky("a\0b\xC3\x28\xFF\xFE\x80", 8);  // NUL, bad continuation, lone bytes
  CHECK(tok.decode(tok.encode(tricky)) == tricky);
  CHECK(tok.encode("").empty());
  CHECK(tok.decode({}).empty());
}

TEST_CASE("encode never emits specials even for special-looking text") {
  ByteTokenizer tok;
  const auto ids = tok.encode("<|eos|>");
  CHECK(ids.size() == 7);
  for (int64_t id : ids) CHECK(id < 256);
}

TEST_CASE("specials decode to their names unless skip_special") {
  ByteTokenizer tok;
  const Tokenizer& base = tok;  // exercise the interface's default argument
  std::vector<int64_t> ids = {tok.bos_id()};
  for (int64_t id : tok.encode("hi")) ids.push_back(id);
  ids.push_back(tok.eos_id());
  ids.push_back(tok.pad_id());
  CHECK(base.decode(ids) == "<|bos|>hi<|eos|><|pad|>");
  CHECK(base.decode(ids, /*skip_special=*/true) == "hi");

  const std::vector<int64_t> roles = {259, 260, 261, 262, 263};
  CHECK(tok.decode(roles) == "<|user|><|assistant|><|tool|><|obs|><|sep|>");
  CHECK(tok.decode(roles, true).empty());
}

TEST_CASE("vocabulary layout and special_id lookups") {
  ByteTokenizer tok;
  CHECK(tok.vocab_size() == 264);
  CHECK(tok.pad_id() == 256);
  CHECK(tok.bos_id() == 257);
  CHECK(tok.eos_id() == 258);
  const std::vector<std::pair<std::string, int64_t>> expected = {
      {"<|pad|>", 256},       {"<|bos|>", 257},  {"<|eos|>", 258}, {"<|user|>", 259},
      {"<|assistant|>", 260}, {"<|tool|>", 261}, {"<|obs|>", 262}, {"<|sep|>", 263}};
  for (const auto& [name, id] : expected) {
    CAPTURE(name);
    REQUIRE(tok.special_id(name).has_value());
    CHECK(*tok.special_id(name) == id);
    CHECK(tok.is_special(id));
    CHECK(ByteTokenizer::special_name(id) == name);
  }
  CHECK_FALSE(tok.special_id("<|nope|>").has_value());
  CHECK_FALSE(tok.special_id("eos").has_value());
  CHECK_FALSE(tok.special_id("").has_value());
  CHECK_FALSE(tok.is_special(0));
  CHECK_FALSE(tok.is_special(255));
  CHECK_FALSE(tok.is_special(264));
  CHECK_FALSE(tok.is_special(-1));
}

TEST_CASE("decoding an out-of-range id throws naming the id") {
  ByteTokenizer tok;
  auto message_for = [&](const std::vector<int64_t>& ids) {
    try {
      tok.decode(ids);
    } catch (const sao::Error& e) {
      return std::string(e.what());
    }
    return std::string("no throw");
  };
  const std::string too_big = message_for({104, 105, 264});
  CHECK(too_big.find("264") != std::string::npos);
  CHECK(too_big.find("position 2") != std::string::npos);
  CHECK(message_for({-5}).find("-5") != std::string::npos);
  CHECK(message_for({1000000}).find("1000000") != std::string::npos);
  CHECK_THROWS_AS(tok.decode({264}, /*skip_special=*/true), sao::Error);
  CHECK_THROWS_AS(ByteTokenizer::special_name(65), sao::Error);
}
