// A Hugging Face tokenizer.json tokenizer: BPE models, byte-level (GPT-2,
// Llama 3, Qwen2/3, SmolLM) and sentencepiece-style with byte fallback
// (Llama 2, Mistral), with the normalizers, pre-tokenizers, added tokens and
// decoders those files declare. What it supports is what it can prove equal
// to Hugging Face's own implementation (tests/test_parity_tokenizer.cpp runs
// both on the same strings); any other component is refused at load with
// the key that names it, never silently approximated.
#pragma once

#include "tokenizer/tokenizer.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sao::tokenizer {

class HfTokenizer final : public Tokenizer {
 public:
  // Reads DIRECTORY/tokenizer.json and, when present,
  // DIRECTORY/tokenizer_config.json (bos/eos/pad tokens,
  // clean_up_tokenization_spaces) and DIRECTORY/generation_config.json
  // (eos_token_id). Throws sao::Error naming the file and the key of
  // anything malformed or unsupported.
  static HfTokenizer load(const std::string& directory);

  // The same from the two files' texts; `config_json` may be empty. `where`
  // prefixes error messages (a path, usually).
  static HfTokenizer from_json_text(const std::string& tokenizer_json, const std::string& config_json,
                                    const std::string& where);

  // Plain text to ids: special tokens' text inside `text` is encoded as
  // text (so user text cannot forge them); other added tokens are matched.
  // Invalid UTF-8 is first replaced as the HF stack's UTF-8 readers do (one
  // U+FFFD per maximal subpart).
  std::vector<int64_t> encode(std::string_view text) const override;

  // Hugging Face's default encode (add_special_tokens=false): every added
  // token, special or not, is matched in `text`. For templates and trusted
  // text only.
  std::vector<int64_t> encode_with_special_tokens(std::string_view text) const;

  // A chat template's text around untrusted text, as one text: `parts`
  // alternate template text (every added token matched) and untrusted text
  // (parts 1, 3, ...: special tokens' text stays text, as in encode()). Why
  // one text and not each part alone: pre-tokenisation runs across the joins
  // exactly as Hugging Face's encode of the rendered conversation does (an
  // observation ending in '")' before the template's "\n" is one piece
  // '")\n' there), so the ids equal apply_chat_template's for any text
  // without special tokens in it.
  std::vector<int64_t> encode_template(const std::vector<std::string_view>& parts) const;

  // What Hugging Face's decode gives, including its
  // clean_up_tokenization_spaces when the config asks for it. Throws
  // sao::Error for an id outside [0, vocab_size()).
  std::string decode(const std::vector<int64_t>& ids, bool skip_special = false) const override;

  int64_t vocab_size() const override;
  // -1 where tokenizer_config.json names no such token (Qwen has no BOS).
  int64_t bos_id() const override;
  int64_t eos_id() const override;
  int64_t pad_id() const override;
  // EOS, then generation_config.json's eos_token_id (one id or a list) when
  // load() found that file.
  std::vector<int64_t> stop_ids() const override;

  // Id of an added token by its content ("<|im_start|>").
  std::optional<int64_t> special_id(std::string_view name) const override;
  bool is_special(int64_t id) const override;

  // The vocabulary entry of `id` (an added token's content for those).
  const std::string& token(int64_t id) const;
  std::optional<int64_t> token_id(std::string_view token) const;

  struct Impl;

 private:
  explicit HfTokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// GPT-2's printable stand-in for `byte` (the ByteLevel pre-tokenizer's
// alphabet), as UTF-8: "A" for 0x41, U+0120 for a space.
const std::string& byte_level_char(std::uint8_t byte);

}  // namespace sao::tokenizer
