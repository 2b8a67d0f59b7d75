// The stages of a tokenizer.json around its model: normalizers,
// pre-tokenizers and decoders, built from the file's JSON as Hugging Face
// defines them, each bounded (the file comes with a model directory: a
// hostile one must end in an error naming the component, not fill memory).
#pragma once

#include "base/error.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace sao::tokenizer::hf {

// Length of the UTF-8 character starting at s[i] (valid UTF-8 assumed).
std::size_t char_length(std::string_view s, std::size_t i);
bool is_white_space(uint32_t cp);
uint32_t code_point_at(std::string_view s, std::size_t i);
const nlohmann::json& require_key(const nlohmann::json& object, const char* key, const std::string& where);
std::string string_at(const nlohmann::json& object, const char* key, const std::string& where);
bool bool_or(const nlohmann::json& object, const char* key, bool fallback, const std::string& where);

// ---- bounds on a pipeline -------------------------------------------------

// A normalizer, pre-tokenizer or decoder is a program from a model directory
// too: a Sequence of Replace steps that each double the text would fill
// memory, and Sequences nested without end would exhaust the stack. Real
// pipelines swap 1-byte spaces for 3-byte "▁", add a prefix and NFKC
// (which expands some characters up to 18-fold): far below these bounds.
constexpr std::size_t kMaxGrowth = 64;          // output bytes per input byte ...
constexpr std::size_t kGrowthSlack = 4096;      // ... plus this many
constexpr int kMaxSequenceDepth = 16;           // Sequence inside Sequence
constexpr std::size_t kMaxPipelineSteps = 256;  // components of one pipeline, Sequences included

// The most bytes one run of a pipeline may hand on, from its input's size.
class OutputBound {
 public:
  explicit OutputBound(std::size_t input_bytes)
      : input_bytes_(input_bytes), max_bytes_(kMaxGrowth * input_bytes + kGrowthSlack) {}
  void check(std::size_t bytes, const std::string& where) const {
    if (bytes > max_bytes_)
      throw Error(where + ": the text grows past " + std::to_string(max_bytes_) + " bytes from " +
                  std::to_string(input_bytes_) + " (the limit is " + std::to_string(kMaxGrowth) + " x the input + " +
                  std::to_string(kGrowthSlack) + ")");
  }

 private:
  std::size_t input_bytes_;
  std::size_t max_bytes_;
};

// Counts a pipeline's components and Sequence nesting while it is built.
struct PipelineShape {
  int depth = 0;
  std::size_t steps = 0;
  void add_step(const std::string& where) {
    if (++steps > kMaxPipelineSteps)
      throw Error(where + ": the pipeline has more than " + std::to_string(kMaxPipelineSteps) + " components");
  }
  void enter_sequence(const std::string& where) {
    if (++depth > kMaxSequenceDepth)
      throw Error(where + ": Sequences nest deeper than " + std::to_string(kMaxSequenceDepth));
  }
};

using Normalizer = std::function<std::string(std::string, const OutputBound&)>;
Normalizer make_normalizer(const nlohmann::json& config, const std::string& where, PipelineShape& shape);

// A word as the pre-tokenizers pass it along. `first` marks the piece that
// starts the whole text (Metaspace's "first" prepend scheme looks at it).
struct Piece {
  std::string text;
  bool first = false;
};
using PreTokenizer = std::function<std::vector<Piece>(std::vector<Piece>, const OutputBound&)>;
PreTokenizer make_pre_tokenizer(const nlohmann::json& config, const std::string& where, PipelineShape& shape);

// Decoders work on the tokens' strings, as Hugging Face's do; `added`
// marks tokens that are added tokens (the ByteLevel decoder leaves those
// verbatim).
struct DecodeToken {
  std::string text;
  bool added = false;
};
using Decoder = std::function<std::vector<DecodeToken>(std::vector<DecodeToken>, const OutputBound&)>;
Decoder make_decoder(const nlohmann::json& config, const std::string& where, PipelineShape& shape);

// Hugging Face's clean_up_tokenization: the spaces a word-level detokeniser
// leaves before punctuation and English contractions.
std::string clean_up_tokenization(std::string text);

}  // namespace sao::tokenizer::hf
