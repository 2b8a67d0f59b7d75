// sao's byte tokenizer as Hugging Face tokenizer files, so that `sao export`
// of a byte-level run writes a directory that loads with `--model` and with
// Hugging Face's tokenizer libraries. tokenizer.json is a byte-level BPE with
// no merges: its 256 vocabulary entries are GPT-2's stand-ins for the bytes
// 0..255 (id = byte value) and its added tokens are the byte tokenizer's
// specials at their ids, so every text encodes to its bytes, as
// ByteTokenizer::encode does.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace sao::tokenizer {

class Tokenizer;

// tokenizer.json and tokenizer_config.json (bos/eos/pad) of the byte tokenizer.
nlohmann::json byte_tokenizer_json();
nlohmann::json byte_tokenizer_config_json();

// generation_config.json for `tokenizer`: its bos/eos/pad ids and sampling
// at the policy's own distribution (temperature 1, no top-k or top-p).
nlohmann::json generation_config_json(const Tokenizer& tokenizer);

// Whether `model_directory` holds exactly the files above (tokenizer.json
// equal as JSON; tokenizer_config.json absent or equal; generation_config.json
// absent or stopping at the byte tokenizer's EOS alone). Runs then use the
// ByteTokenizer itself: the same ids for every byte string, invalid UTF-8
// included, where a tokenizer.json reader first turns invalid UTF-8 into
// U+FFFD. Throws sao::Error only as base::read_small_file does.
bool is_byte_tokenizer_directory(const std::string& model_directory);

}  // namespace sao::tokenizer
