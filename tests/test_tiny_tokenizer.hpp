// Two tiny tokenizer.json files, built in code: a byte-level BPE (GPT-2
// style: 256 byte stand-ins, seven merges, a special and a non-special added
// token) and a sentencepiece-style BPE with byte fallback. test_tokenizer_hf
// checks them against ids Hugging Face's tokenizers gave; other tests use
// them wherever a model directory needs a tokenizer.
#pragma once

#include "base/utf8.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace sao_test {

// GPT-2's byte stand-ins: printable Latin-1 bytes are themselves, the rest
// are shifted to U+0100 and up in byte order.
inline std::string byte_char(int b) {
  static std::vector<uint32_t> map = [] {
    std::vector<uint32_t> cps(256);
    uint32_t shifted = 256;
    for (int i = 0; i < 256; ++i) {
      const bool printable = (i >= '!' && i <= '~') || (i >= 0xA1 && i <= 0xAC) || (i >= 0xAE && i <= 0xFF);
      cps[static_cast<std::size_t>(i)] = printable ? static_cast<uint32_t>(i) : shifted++;
    }
    return cps;
  }();
  return sao::base::encode_utf8(map[static_cast<std::size_t>(b)]);
}

inline nlohmann::json byte_level_json() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  const std::vector<std::string> extra = {"ll", "he", "hell", "hello", "aa", "\xC4\xA0w", "\xC4\xA0wo"};
  for (std::size_t i = 0; i < extra.size(); ++i) vocab[extra[i]] = 256 + static_cast<int>(i);
  return {{"added_tokens",
           {{{"id", 300},
             {"content", "<|special|>"},
             {"lstrip", false},
             {"rstrip", false},
             {"normalized", false},
             {"single_word", false},
             {"special", true}},
            {{"id", 301},
             {"content", "<tool>"},
             {"lstrip", true},
             {"rstrip", true},
             {"normalized", false},
             {"single_word", false},
             {"special", false}}}},
          {"normalizer", nullptr},
          {"pre_tokenizer",
           {{"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Split"},
               {"pattern", {{"Regex", " ?\\p{L}+|\\p{N}|\\s+|[^\\s\\p{L}\\p{N}]+"}}},
               {"behavior", "Isolated"},
               {"invert", false}},
              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model",
           {{"type", "BPE"},
            {"vocab", vocab},
            {"merges", {"l l", "h e", "he ll", "hell o", "a a", "\xC4\xA0 w", "\xC4\xA0w o"}}}}};
}

inline nlohmann::json sentencepiece_json() {
  nlohmann::json vocab = {{"<unk>", 0}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = 1 + b;
  }
  vocab["\xE2\x96\x81"] = 257;  // U+2581, sentencepiece's word marker
  vocab["a"] = 258;
  vocab["b"] = 259;
  vocab
      ["\xE2\x96\x81"
       "a"] = 260;
  vocab["ab"] = 261;
  return {{"added_tokens", {{{"id", 0}, {"content", "<unk>"}, {"normalized", false}, {"special", true}}}},
          {"normalizer",
           {{"type", "Sequence"},
            {"normalizers",
             {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}}},
          {"pre_tokenizer", nullptr},
          {"decoder",
           {{"type", "Sequence"},
            {"decoders",
             {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
              {{"type", "ByteFallback"}},
              {{"type", "Fuse"}},
              {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
          {"model",
           {{"type", "BPE"},
            {"unk_token", "<unk>"},
            {"fuse_unk", true},
            {"byte_fallback", true},
            {"vocab", vocab},
            {"merges", {"\xE2\x96\x81 a", "a b"}}}}};
}

}  // namespace sao_test
