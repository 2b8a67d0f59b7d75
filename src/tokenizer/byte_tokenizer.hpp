// Byte-level tokenizer: ids 0..255 are raw bytes, specials follow. Why bytes:
// it needs no vocabulary file, every byte string (NUL, invalid UTF-8) round
// trips exactly, and it is small enough for the tiny models the first tasks
// train from scratch.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.hpp"

namespace sao::tokenizer {

class ByteTokenizer final : public Tokenizer {
 public:
  // Fixed ids, public so tests and tiny-model configs can refer to them.
  static constexpr int64_t kNumBytes = 256;
  static constexpr int64_t kPad = 256;
  static constexpr int64_t kBos = 257;
  static constexpr int64_t kEos = 258;
  static constexpr int64_t kUser = 259;
  static constexpr int64_t kAssistant = 260;
  static constexpr int64_t kTool = 261;
  static constexpr int64_t kObs = 262;
  static constexpr int64_t kSep = 263;
  static constexpr int64_t kVocabSize = 264;

  std::vector<int64_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int64_t>& ids, bool skip_special = false) const override;

  int64_t vocab_size() const override { return kVocabSize; }
  int64_t bos_id() const override { return kBos; }
  int64_t eos_id() const override { return kEos; }
  int64_t pad_id() const override { return kPad; }

  std::optional<int64_t> special_id(std::string_view name) const override;
  bool is_special(int64_t id) const override { return id >= kNumBytes && id < kVocabSize; }

  // Name of a special id ("<|eos|>"); throws sao::Error if id is not special.
  static std::string_view special_name(int64_t id);

 private:
  static const std::array<std::string_view, kVocabSize - kNumBytes>& special_names();
};

}  // namespace sao::tokenizer
