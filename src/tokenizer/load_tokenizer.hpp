// The tokenizer of a run: sao's byte tokenizer, or the tokenizer.json of a
// Hugging Face model directory. Everything that turns text into ids (warm
// start, rollouts, evaluation) asks here, so a run never mixes the two.
#pragma once

#include "tokenizer/tokenizer.hpp"

#include <memory>
#include <string>
#include <vector>

namespace sao::tokenizer {

// `model_directory` "" gives the ByteTokenizer, and so does a directory
// holding the byte tokenizer's own files (an export of a byte-level run,
// byte_tokenizer_files.hpp); otherwise HfTokenizer::load,
// wrapped in a ChatTokenizer when `prompt_format` is "chat", or "auto" and
// the directory has a chat template; "plain" keeps sao's plain turns.
// Throws sao::Error for another format, or "chat" without a template.
std::shared_ptr<const Tokenizer> load_tokenizer(const std::string& model_directory,
                                                const std::string& prompt_format = "auto");

// Text of ids a model generated. A model's embedding often has rows past the
// tokenizer's last id (Qwen pads 151669 ids to 151936); they have no text and
// are dropped, where decode() would refuse them.
std::string decode_generated(const Tokenizer& tokenizer, const std::vector<int64_t>& ids);

// The ids that start every sequence: BOS where the vocabulary has one
// (Llama), none where it does not (Qwen).
std::vector<int64_t> sequence_start(const Tokenizer& tokenizer);

// The id that fills padded slots: PAD, else EOS (Llama 3 names no PAD).
// Padded slots are masked out of every loss, so any real id serves.
int64_t padding_id(const Tokenizer& tokenizer);

// An environment's text as ids. An empty observation becomes <|obs|> where
// the vocabulary has it, else a newline: a turn needs at least one
// environment token between two actions.
std::vector<int64_t> encode_observation(const Tokenizer& tokenizer, std::string_view text);

}  // namespace sao::tokenizer
