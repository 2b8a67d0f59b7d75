// Byte tokenizer implementation. Why encode is a plain byte copy: keeping
// specials out of encode means no text, however adversarial, can produce a
// control token; only code that means to emit one does.
#include "tokenizer/byte_tokenizer.hpp"

#include <string>

#include "base/error.hpp"

namespace sao::tokenizer {

const std::array<std::string_view, ByteTokenizer::kVocabSize - ByteTokenizer::kNumBytes>&
ByteTokenizer::special_names() {
  // Order must match the k* id constants in the header.
  static const std::array<std::string_view, kVocabSize - kNumBytes> names = {
      "<|pad|>", "<|bos|>", "<|eos|>", "<|user|>", "<|assistant|>", "<|tool|>", "<|obs|>", "<|sep|>"};
  return names;
}

std::vector<int64_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size());
  // Go through unsigned char so bytes >= 0x80 map to 128..255, not negatives.
  for (char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int64_t>& ids, bool skip_special) const {
  std::string text;
  text.reserve(ids.size());
  for (size_t pos = 0; pos < ids.size(); ++pos) {
    const int64_t id = ids[pos];
    if (id < 0 || id >= kVocabSize) {
      throw sao::Error("ByteTokenizer::decode: token id " + std::to_string(id) + " at position " + std::to_string(pos) +
                       " is outside the vocabulary [0, " + std::to_string(kVocabSize) + ")");
    }
    if (id < kNumBytes) {
      text.push_back(static_cast<char>(static_cast<unsigned char>(id)));
    } else if (!skip_special) {
      text += special_name(id);
    }
  }
  return text;
}

std::optional<int64_t> ByteTokenizer::special_id(std::string_view name) const {
  const auto& names = special_names();
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return kNumBytes + static_cast<int64_t>(i);
  }
  return std::nullopt;
}

std::string_view ByteTokenizer::special_name(int64_t id) {
  if (id < kNumBytes || id >= kVocabSize) {
    throw sao::Error("ByteTokenizer::special_name: token id " + std::to_string(id) +
                     " is not a special token (specials are " + std::to_string(kNumBytes) + ".." +
                     std::to_string(kVocabSize - 1) + ")");
  }
  return special_names()[static_cast<size_t>(id - kNumBytes)];
}

}  // namespace sao::tokenizer
