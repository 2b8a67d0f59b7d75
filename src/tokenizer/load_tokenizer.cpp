// Tokenizer selection; see load_tokenizer.hpp.
#include "tokenizer/load_tokenizer.hpp"

#include "base/error.hpp"
#include "tokenizer/byte_tokenizer.hpp"
#include "tokenizer/byte_tokenizer_files.hpp"
#include "tokenizer/chat_tokenizer.hpp"
#include "tokenizer/hf_tokenizer.hpp"

namespace sao::tokenizer {

std::shared_ptr<const Tokenizer> load_tokenizer(const std::string& model_directory, const std::string& prompt_format) {
  if (prompt_format != "auto" && prompt_format != "chat" && prompt_format != "plain")
    throw Error("prompt format \"" + prompt_format + "\" is not one of auto, chat, plain");
  // An export of a byte-level run is read back as the byte tokenizer itself
  // (byte_tokenizer_files.hpp): the same ids for every byte string.
  if (model_directory.empty() || is_byte_tokenizer_directory(model_directory)) {
    if (prompt_format == "chat") throw Error("prompt format \"chat\" needs a model directory with a chat template");
    return std::make_shared<ByteTokenizer>();
  }
  auto tokenizer = std::make_shared<const HfTokenizer>(HfTokenizer::load(model_directory));
  if (prompt_format == "plain") return tokenizer;
  auto chat_template = load_chat_template(model_directory);
  if (!chat_template) {
    if (prompt_format == "chat")
      throw Error(model_directory + ": prompt format \"chat\" but the model has no chat template (a base model)");
    return tokenizer;
  }
  return std::make_shared<ChatTokenizer>(tokenizer, std::move(*chat_template), model_directory);
}

std::string decode_generated(const Tokenizer& tokenizer, const std::vector<int64_t>& ids) {
  std::vector<int64_t> known;
  known.reserve(ids.size());
  for (const auto id : ids) {
    if (id >= 0 && id < tokenizer.vocab_size()) known.push_back(id);
  }
  return tokenizer.decode(known, /*skip_special=*/true);
}

std::vector<int64_t> sequence_start(const Tokenizer& tokenizer) {
  if (tokenizer.bos_id() < 0) return {};
  return {tokenizer.bos_id()};
}

int64_t padding_id(const Tokenizer& tokenizer) {
  if (tokenizer.pad_id() >= 0) return tokenizer.pad_id();
  return tokenizer.eos_id() >= 0 ? tokenizer.eos_id() : 0;
}

std::vector<int64_t> encode_observation(const Tokenizer& tokenizer, std::string_view text) {
  auto ids = tokenizer.encode(text);
  if (!ids.empty()) return ids;
  if (const auto obs = tokenizer.special_id("<|obs|>")) return {*obs};
  return tokenizer.encode("\n");
}

}  // namespace sao::tokenizer
