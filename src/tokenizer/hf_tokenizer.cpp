// tokenizer.json loading, encoding and decoding; see hf_tokenizer.hpp. The
// pipeline is Hugging Face's: split on added tokens, normalise each piece
// between them, pre-tokenise into words, BPE each word, map to ids; decoding
// runs the declared decoders over the tokens' strings.
#include "tokenizer/hf_tokenizer.hpp"

#include "base/error.hpp"
#include "base/json_parse.hpp"
#include "base/small_file.hpp"
#include "base/unicode_regex.hpp"
#include "base/utf8.hpp"

#include <utf8proc.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <queue>
#include <unordered_map>
#include <unordered_set>

namespace sao::tokenizer {

namespace {

using Json = nlohmann::json;

// Ids index a table of that many entries, so a hostile file must not name
// id 2^31. Real vocabularies stay far below (Gemma 3: 262,144).
constexpr uint64_t kMaxTokenIds = 1u << 20;

// ---- small helpers ---------------------------------------------------------

// Length of the UTF-8 character starting at s[i] (valid UTF-8 assumed).
std::size_t char_length(std::string_view s, std::size_t i) {
  const auto lead = static_cast<unsigned char>(s[i]);
  if (lead < 0x80) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

void replace_all(std::string& text, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  std::size_t start = 0;
  for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, start)) {
    out.append(text, start, at - start);
    out += to;
    start = at + from.size();
  }
  if (start == 0) return;
  out.append(text, start, std::string::npos);
  text = std::move(out);
}

bool is_white_space(uint32_t cp) {
  return (cp >= 0x9 && cp <= 0xD) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

uint32_t code_point_at(std::string_view s, std::size_t i) {
  utf8proc_int32_t cp = 0;
  utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i), static_cast<utf8proc_ssize_t>(s.size() - i),
                   &cp);
  return static_cast<uint32_t>(cp);
}

const Json& require_key(const Json& object, const char* key, const std::string& where) {
  if (!object.is_object() || !object.contains(key)) throw Error(where + ": missing key '" + key + "'");
  return object.at(key);
}

std::string string_at(const Json& object, const char* key, const std::string& where) {
  const Json& value = require_key(object, key, where);
  if (!value.is_string()) throw Error(where + "." + key + ": expected a string, got " + value.type_name());
  return value.get<std::string>();
}

bool bool_or(const Json& object, const char* key, bool fallback, const std::string& where) {
  if (!object.contains(key) || object.at(key).is_null()) return fallback;
  if (!object.at(key).is_boolean()) throw Error(where + "." + key + ": expected true or false");
  return object.at(key).get<bool>();
}

// A "pattern" object: {"String": s} (literal) or {"Regex": r}.
struct Pattern {
  std::string literal;
  std::shared_ptr<base::UnicodeRegex> regex;

  static Pattern from_json(const Json& value, const std::string& where) {
    Pattern pattern;
    if (value.is_object() && value.contains("String") && value.at("String").is_string()) {
      pattern.literal = value.at("String").get<std::string>();
      if (pattern.literal.empty()) throw Error(where + ".String: an empty pattern matches nowhere useful");
    } else if (value.is_object() && value.contains("Regex") && value.at("Regex").is_string()) {
      pattern.regex = std::make_shared<base::UnicodeRegex>(value.at("Regex").get<std::string>(), where + ".Regex");
    } else {
      throw Error(where + ": expected {\"String\": ...} or {\"Regex\": ...}");
    }
    return pattern;
  }

  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view text) const {
    if (regex) return regex->find_all(text);
    std::vector<std::pair<std::size_t, std::size_t>> found;
    for (std::size_t at = text.find(literal); at != std::string_view::npos;
         at = text.find(literal, at + literal.size()))
      found.emplace_back(at, at + literal.size());
    return found;
  }
};

// ---- GPT-2's byte <-> printable character map -----------------------------

struct ByteMap {
  std::array<std::string, 256> to_char;           // byte -> UTF-8 of its stand-in character
  std::unordered_map<uint32_t, uint8_t> to_byte;  // stand-in code point -> byte
  ByteMap() {
    // Printable Latin-1 bytes stand for themselves; the other 68 are shifted
    // to U+0100 and up, in byte order (GPT-2's bytes_to_unicode).
    uint32_t shifted = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const uint32_t cp = printable ? b : shifted++;
      to_char[b] = base::encode_utf8(cp);
      to_byte[cp] = static_cast<uint8_t>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

// GPT-2's split pattern, which ByteLevel uses when "use_regex" is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// ---- normalizers -----------------------------------------------------------

using Normalizer = std::function<std::string(std::string)>;

std::string unicode_normal_form(const std::string& text, utf8proc_option_t options) {
  utf8proc_uint8_t* mapped = nullptr;
  const auto length =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                   &mapped, static_cast<utf8proc_option_t>(options | UTF8PROC_STABLE));
  if (length < 0) throw Error(std::string("unicode normalisation failed: ") + utf8proc_errmsg(length));
  std::string out(reinterpret_cast<const char*>(mapped), static_cast<std::size_t>(length));
  std::free(mapped);
  return out;
}

Normalizer make_normalizer(const Json& config, const std::string& where) {
  const std::string type = string_at(config, "type", where);
  if (type == "Sequence") {
    std::vector<Normalizer> steps;
    const Json& list = require_key(config, "normalizers", where);
    if (!list.is_array()) throw Error(where + ".normalizers: expected an array");
    for (std::size_t i = 0; i < list.size(); ++i)
      steps.push_back(make_normalizer(list[i], where + ".normalizers[" + std::to_string(i) + "]"));
    return [steps](std::string text) {
      for (const auto& step : steps) text = step(std::move(text));
      return text;
    };
  }
  if (type == "NFC") return [](std::string text) { return unicode_normal_form(text, UTF8PROC_COMPOSE); };
  if (type == "NFD") return [](std::string text) { return unicode_normal_form(text, UTF8PROC_DECOMPOSE); };
  if (type == "NFKC") {
    return [](std::string text) {
      return unicode_normal_form(text, static_cast<utf8proc_option_t>(UTF8PROC_COMPOSE | UTF8PROC_COMPAT));
    };
  }
  if (type == "NFKD") {
    return [](std::string text) {
      return unicode_normal_form(text, static_cast<utf8proc_option_t>(UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT));
    };
  }
  if (type == "Prepend") {
    const std::string prefix = string_at(config, "prepend", where);
    return [prefix](std::string text) { return text.empty() ? text : prefix + text; };
  }
  if (type == "Replace") {
    const Pattern pattern = Pattern::from_json(require_key(config, "pattern", where), where + ".pattern");
    const std::string content = string_at(config, "content", where);
    return [pattern, content](std::string text) {
      std::string out;
      std::size_t last = 0;
      for (const auto& [begin, end] : pattern.find_all(text)) {
        out.append(text, last, begin - last);
        out += content;
        last = end;
      }
      out.append(text, last, std::string::npos);
      return out;
    };
  }
  throw Error(where + ".type: normalizer '" + type +
              "' is not supported (supported: Sequence, NFC, NFD, NFKC, NFKD, Prepend, Replace)");
}

// ---- pre-tokenizers --------------------------------------------------------

// A word as the pre-tokenizers pass it along. `first` marks the piece that
// starts the whole text (Metaspace's "first" prepend scheme looks at it).
struct Piece {
  std::string text;
  bool first = false;
};
using PreTokenizer = std::function<std::vector<Piece>(std::vector<Piece>)>;

PreTokenizer make_pre_tokenizer(const Json& config, const std::string& where);

// Splits each piece at `pattern`'s matches; "Isolated" keeps matches and the
// text between as separate pieces, "Removed" drops the matches. With
// `invert`, the roles of matches and the text between swap.
PreTokenizer make_split(Pattern pattern, bool keep_delimiters, bool invert) {
  return [pattern = std::move(pattern), keep_delimiters, invert](std::vector<Piece> pieces) {
    std::vector<Piece> out;
    for (auto& piece : pieces) {
      auto emit = [&](std::size_t begin, std::size_t end, bool is_match) {
        if (end <= begin) return;
        const bool delimiter = invert ? !is_match : is_match;
        if (delimiter && !keep_delimiters) return;
        out.push_back({piece.text.substr(begin, end - begin), piece.first && begin == 0});
      };
      std::size_t last = 0;
      for (const auto& [begin, end] : pattern.find_all(piece.text)) {
        emit(last, begin, false);
        emit(begin, end, true);
        last = end;
      }
      emit(last, piece.text.size(), false);
    }
    return out;
  };
}

PreTokenizer make_byte_level(const Json& config, const std::string& where) {
  const bool add_prefix_space = bool_or(config, "add_prefix_space", true, where);
  const bool use_regex = bool_or(config, "use_regex", true, where);
  std::optional<PreTokenizer> split;
  if (use_regex) {
    Pattern gpt2;
    gpt2.regex = std::make_shared<base::UnicodeRegex>(kGpt2Pattern, where + " (GPT-2 pattern)");
    split = make_split(gpt2, true, false);
  }
  return [add_prefix_space, split](std::vector<Piece> pieces) {
    if (add_prefix_space) {
      for (auto& piece : pieces) {
        if (piece.text.empty() || piece.text[0] != ' ') piece.text.insert(0, " ");
      }
    }
    if (split) pieces = (*split)(std::move(pieces));
    const auto& map = byte_map();
    for (auto& piece : pieces) {
      std::string mapped;
      mapped.reserve(piece.text.size() * 2);
      for (const char c : piece.text) mapped += map.to_char[static_cast<unsigned char>(c)];
      piece.text = std::move(mapped);
    }
    return pieces;
  };
}

// Metaspace's prepend_scheme, or what the older add_prefix_space key meant.
std::string metaspace_scheme(const Json& config, const std::string& where) {
  std::string scheme = "always";
  if (config.contains("prepend_scheme")) {
    scheme = string_at(config, "prepend_scheme", where);
  } else if (config.contains("add_prefix_space")) {
    scheme = bool_or(config, "add_prefix_space", true, where) ? "always" : "never";
  }
  if (scheme != "always" && scheme != "first" && scheme != "never")
    throw Error(where + ".prepend_scheme: expected \"always\", \"first\" or \"never\", got \"" + scheme + "\"");
  return scheme;
}

PreTokenizer make_metaspace(const Json& config, const std::string& where) {
  const std::string replacement = string_at(config, "replacement", where);
  if (replacement.empty()) throw Error(where + ".replacement: must not be empty");
  const std::string scheme = metaspace_scheme(config, where);
  const bool split = bool_or(config, "split", true, where);
  return [replacement, scheme, split](std::vector<Piece> pieces) {
    std::vector<Piece> out;
    for (auto& piece : pieces) {
      replace_all(piece.text, " ", replacement);
      const bool prepend = scheme == "always" || (scheme == "first" && piece.first);
      if (prepend && piece.text.compare(0, replacement.size(), replacement) != 0) piece.text.insert(0, replacement);
      if (!split) {
        out.push_back(std::move(piece));
        continue;
      }
      // Each replacement character starts a new word (MergedWithNext).
      std::size_t start = 0;
      for (std::size_t at = piece.text.find(replacement, 1); at != std::string::npos;
           at = piece.text.find(replacement, at + replacement.size())) {
        out.push_back({piece.text.substr(start, at - start), piece.first && start == 0});
        start = at;
      }
      if (start < piece.text.size()) out.push_back({piece.text.substr(start), piece.first && start == 0});
    }
    return out;
  };
}

PreTokenizer make_pre_tokenizer(const Json& config, const std::string& where) {
  const std::string type = string_at(config, "type", where);
  if (type == "Sequence") {
    std::vector<PreTokenizer> steps;
    const Json& list = require_key(config, "pretokenizers", where);
    if (!list.is_array()) throw Error(where + ".pretokenizers: expected an array");
    for (std::size_t i = 0; i < list.size(); ++i)
      steps.push_back(make_pre_tokenizer(list[i], where + ".pretokenizers[" + std::to_string(i) + "]"));
    return [steps](std::vector<Piece> pieces) {
      for (const auto& step : steps) pieces = step(std::move(pieces));
      return pieces;
    };
  }
  if (type == "Split") {
    const Pattern pattern = Pattern::from_json(require_key(config, "pattern", where), where + ".pattern");
    const std::string behavior = string_at(config, "behavior", where);
    if (behavior != "Isolated" && behavior != "Removed") {
      throw Error(where + ".behavior: '" + behavior + "' is not supported (supported: Isolated, Removed)");
    }
    return make_split(pattern, behavior == "Isolated", bool_or(config, "invert", false, where));
  }
  if (type == "ByteLevel") return make_byte_level(config, where);
  if (type == "Metaspace") return make_metaspace(config, where);
  throw Error(where + ".type: pre-tokenizer '" + type +
              "' is not supported (supported: Sequence, Split, ByteLevel, Metaspace)");
}

// ---- decoders --------------------------------------------------------------

// Decoders work on the tokens' strings, as Hugging Face's do; `added`
// marks tokens that are added tokens (the ByteLevel decoder leaves those
// verbatim).
struct DecodeToken {
  std::string text;
  bool added = false;
};
using Decoder = std::function<std::vector<DecodeToken>(std::vector<DecodeToken>)>;

std::string bytes_from_byte_chars(std::string_view text) {
  std::string bytes;
  const auto& map = byte_map();
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t length = char_length(text, i);
    const uint32_t cp = code_point_at(text, i);
    const auto found = map.to_byte.find(cp);
    if (found != map.to_byte.end()) {
      bytes += static_cast<char>(found->second);
    } else {
      bytes.append(text.substr(i, length));  // not a stand-in: kept as it is
    }
    i += length;
  }
  return bytes;
}

// "<0x41>" -> 0x41; nullopt for anything else.
std::optional<uint8_t> byte_token_value(std::string_view token) {
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return std::nullopt;
  unsigned value = 0;
  for (std::size_t i = 3; i < 5; ++i) {
    const char c = token[i];
    value <<= 4;
    if (c >= '0' && c <= '9') {
      value |= static_cast<unsigned>(c - '0');
    } else if (c >= 'A' && c <= 'F') {
      value |= static_cast<unsigned>(c - 'A' + 10);
    } else if (c >= 'a' && c <= 'f') {
      value |= static_cast<unsigned>(c - 'a' + 10);
    } else {
      return std::nullopt;
    }
  }
  return static_cast<uint8_t>(value);
}

Decoder make_decoder(const Json& config, const std::string& where) {
  const std::string type = string_at(config, "type", where);
  if (type == "Sequence") {
    std::vector<Decoder> steps;
    const Json& list = require_key(config, "decoders", where);
    if (!list.is_array()) throw Error(where + ".decoders: expected an array");
    for (std::size_t i = 0; i < list.size(); ++i)
      steps.push_back(make_decoder(list[i], where + ".decoders[" + std::to_string(i) + "]"));
    return [steps](std::vector<DecodeToken> tokens) {
      for (const auto& step : steps) tokens = step(std::move(tokens));
      return tokens;
    };
  }
  if (type == "ByteLevel") {
    // Runs of ordinary tokens are joined and mapped back to bytes, then read
    // as UTF-8 (invalid sequences become U+FFFD); added tokens stay verbatim.
    return [](std::vector<DecodeToken> tokens) {
      std::vector<DecodeToken> out;
      std::string run;
      auto flush = [&] {
        if (run.empty()) return;
        out.push_back({base::replace_invalid_utf8(bytes_from_byte_chars(run)), false});
        run.clear();
      };
      for (auto& token : tokens) {
        if (token.added) {
          flush();
          out.push_back(std::move(token));
        } else {
          run += token.text;
        }
      }
      flush();
      return out;
    };
  }
  if (type == "Replace") {
    const Pattern pattern = Pattern::from_json(require_key(config, "pattern", where), where + ".pattern");
    if (pattern.regex) throw Error(where + ".pattern: a Regex pattern in a Replace decoder is not supported");
    const std::string content = string_at(config, "content", where);
    return [pattern, content](std::vector<DecodeToken> tokens) {
      for (auto& token : tokens) replace_all(token.text, pattern.literal, content);
      return tokens;
    };
  }
  if (type == "ByteFallback") {
    // Consecutive <0xXX> tokens become their bytes: one string when they
    // are valid UTF-8, else one U+FFFD per byte.
    return [](std::vector<DecodeToken> tokens) {
      std::vector<DecodeToken> out;
      std::string bytes;
      std::size_t count = 0;
      auto flush = [&] {
        if (count == 0) return;
        if (base::is_valid_utf8(bytes)) {
          out.push_back({bytes, false});
        } else {
          for (std::size_t i = 0; i < count; ++i) out.push_back({"\xEF\xBF\xBD", false});
        }
        bytes.clear();
        count = 0;
      };
      for (auto& token : tokens) {
        const auto value = byte_token_value(token.text);
        if (value) {
          bytes += static_cast<char>(*value);
          ++count;
        } else {
          flush();
          out.push_back(std::move(token));
        }
      }
      flush();
      return out;
    };
  }
  if (type == "Fuse") {
    return [](std::vector<DecodeToken> tokens) {
      DecodeToken fused;
      for (const auto& token : tokens) fused.text += token.text;
      return std::vector<DecodeToken>{fused};
    };
  }
  if (type == "Strip") {
    const std::string content = string_at(config, "content", where);
    if (content.empty()) throw Error(where + ".content: must not be empty");
    const auto& start_value = require_key(config, "start", where);
    const auto& stop_value = require_key(config, "stop", where);
    if (!start_value.is_number_unsigned() || !stop_value.is_number_unsigned())
      throw Error(where + ": start and stop must be non-negative integers");
    const auto start = start_value.get<std::size_t>();
    const auto stop = stop_value.get<std::size_t>();
    return [content, start, stop](std::vector<DecodeToken> tokens) {
      for (auto& token : tokens) {
        for (std::size_t i = 0; i < start && token.text.compare(0, content.size(), content) == 0; ++i)
          token.text.erase(0, content.size());
        for (std::size_t i = 0; i < stop && token.text.size() >= content.size() &&
                                token.text.compare(token.text.size() - content.size(), content.size(), content) == 0;
             ++i)
          token.text.erase(token.text.size() - content.size());
      }
      return tokens;
    };
  }
  if (type == "Metaspace") {
    const std::string replacement = string_at(config, "replacement", where);
    if (replacement.empty()) throw Error(where + ".replacement: must not be empty");
    const std::string scheme = metaspace_scheme(config, where);
    return [replacement, scheme](std::vector<DecodeToken> tokens) {
      for (std::size_t i = 0; i < tokens.size(); ++i) {
        replace_all(tokens[i].text, replacement, " ");
        if (i == 0 && scheme != "never" && !tokens[i].text.empty() && tokens[i].text[0] == ' ')
          tokens[i].text.erase(0, 1);
      }
      return tokens;
    };
  }
  throw Error(where + ".type: decoder '" + type +
              "' is not supported (supported: Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace)");
}

// Hugging Face's clean_up_tokenization: the spaces a word-level detokeniser
// leaves before punctuation and English contractions.
std::string clean_up_tokenization(std::string text) {
  for (const auto& [from, to] : std::initializer_list<std::pair<std::string_view, std::string_view>>{{" .", "."},
                                                                                                     {" ?", "?"},
                                                                                                     {" !", "!"},
                                                                                                     {" ,", ","},
                                                                                                     {" ' ", "'"},
                                                                                                     {" n't", "n't"},
                                                                                                     {" 'm", "'m"},
                                                                                                     {" 's", "'s"},
                                                                                                     {" 've", "'ve"},
                                                                                                     {" 're", "'re"}})
    replace_all(text, from, to);
  return text;
}

struct AddedToken {
  std::string content;
  int64_t id = 0;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
};

}  // namespace

// ---- the tokenizer ---------------------------------------------------------

struct HfTokenizer::Impl {
  std::string where;
  std::unordered_map<std::string, int64_t> vocab;  // model vocabulary and added tokens
  std::vector<std::string> id_to_token;
  std::vector<bool> added_id;    // id is an added token
  std::vector<bool> special_id;  // id is a special added token
  std::vector<AddedToken> added;
  // Added tokens by first byte, longest first, for leftmost-longest matching.
  std::array<std::vector<std::size_t>, 256> added_by_first_byte;

  std::optional<Normalizer> normalizer;
  std::optional<PreTokenizer> pre_tokenizer;
  std::optional<Decoder> decoder;

  // BPE: merge of (left id, right id) -> (rank, merged id).
  std::unordered_map<uint64_t, std::pair<int32_t, int64_t>> merges;
  bool ignore_merges = false;
  bool byte_fallback = false;
  bool fuse_unk = false;
  int64_t unk_id = -1;
  std::array<int64_t, 256> byte_token_ids{};  // "<0xXX>" ids, -1 where absent

  bool clean_up_spaces = false;
  int64_t bos = -1, eos = -1, pad = -1;
  std::vector<int64_t> stop;  // generation_config.json's eos_token_id, when read

  static uint64_t pair_key(int64_t left, int64_t right) {
    return (static_cast<uint64_t>(left) << 32) | static_cast<uint64_t>(right);
  }

  // BPE of one pre-tokenised word, ids appended to `out`.
  void bpe(std::string_view word, std::vector<int64_t>& out) const {
    if (word.empty()) return;
    if (ignore_merges) {
      const auto whole = vocab.find(std::string(word));
      if (whole != vocab.end()) {
        out.push_back(whole->second);
        return;
      }
    }
    struct Symbol {
      int64_t id;
      int prev;
      int next;
    };
    std::vector<Symbol> symbols;
    symbols.reserve(word.size());
    for (std::size_t i = 0; i < word.size();) {
      const std::size_t length = char_length(word, i);
      const auto found = vocab.find(std::string(word.substr(i, length)));
      if (found != vocab.end()) {
        symbols.push_back({found->second, 0, 0});
      } else if (byte_fallback && std::all_of(word.begin() + static_cast<std::ptrdiff_t>(i),
                                              word.begin() + static_cast<std::ptrdiff_t>(i + length), [&](char c) {
                                                return byte_token_ids[static_cast<unsigned char>(c)] >= 0;
                                              })) {
        for (std::size_t k = i; k < i + length; ++k)
          symbols.push_back({byte_token_ids[static_cast<unsigned char>(word[k])], 0, 0});
      } else if (unk_id >= 0) {
        if (!(fuse_unk && !symbols.empty() && symbols.back().id == unk_id)) symbols.push_back({unk_id, 0, 0});
      } else {
        char code[16];
        std::snprintf(code, sizeof(code), "U+%04X", code_point_at(word, i));
        throw Error(where + ": the text has a character with no token and the model has no unk_token (" +
                    std::string(code) + ")");
      }
      i += length;
    }
    const int count = static_cast<int>(symbols.size());
    for (int i = 0; i < count; ++i) {
      symbols[static_cast<std::size_t>(i)].prev = i - 1;
      symbols[static_cast<std::size_t>(i)].next = i + 1 < count ? i + 1 : -1;
    }
    // Lowest rank first; among equal ranks the leftmost (Hugging Face's order).
    struct Candidate {
      int32_t rank;
      int left;
      int64_t left_id;
      int64_t right_id;
      bool operator>(const Candidate& other) const {
        return rank != other.rank ? rank > other.rank : left > other.left;
      }
    };
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
    auto consider = [&](int left) {
      if (left < 0) return;
      const int right = symbols[static_cast<std::size_t>(left)].next;
      if (right < 0) return;
      const int64_t a = symbols[static_cast<std::size_t>(left)].id;
      const int64_t b = symbols[static_cast<std::size_t>(right)].id;
      const auto found = merges.find(pair_key(a, b));
      if (found != merges.end()) queue.push({found->second.first, left, a, b});
    };
    for (int i = 0; i + 1 < count; ++i) consider(i);
    std::vector<bool> gone(static_cast<std::size_t>(count), false);
    while (!queue.empty()) {
      const Candidate top = queue.top();
      queue.pop();
      auto& left = symbols[static_cast<std::size_t>(top.left)];
      if (gone[static_cast<std::size_t>(top.left)] || left.id != top.left_id || left.next < 0) continue;
      auto& right = symbols[static_cast<std::size_t>(left.next)];
      if (right.id != top.right_id) continue;  // stale: a neighbour merged since
      left.id = merges.at(pair_key(top.left_id, top.right_id)).second;
      gone[static_cast<std::size_t>(left.next)] = true;
      left.next = right.next;
      if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].prev = top.left;
      consider(left.prev);
      consider(top.left);
    }
    // Symbol 0 is never merged away (a merge removes the right symbol).
    for (int i = 0; i >= 0; i = symbols[static_cast<std::size_t>(i)].next)
      out.push_back(symbols[static_cast<std::size_t>(i)].id);
  }

  // Normalise, pre-tokenise and BPE text that holds no added token.
  void encode_plain(std::string text, bool starts_text, std::vector<int64_t>& out) const {
    if (text.empty()) return;
    if (normalizer) text = (*normalizer)(std::move(text));
    std::vector<Piece> pieces{{std::move(text), starts_text}};
    if (pre_tokenizer) pieces = (*pre_tokenizer)(std::move(pieces));
    for (const auto& piece : pieces) bpe(piece.text, out);
  }

  std::vector<int64_t> encode(std::string_view raw, bool match_special) const {
    return encode_sanitised(base::replace_invalid_utf8(raw), match_special, {});
  }

  // `untrusted`: sorted, disjoint [begin, end) byte ranges of `text` where no
  // special token may match (nor one that overlaps them).
  std::vector<int64_t> encode_sanitised(const std::string& text, bool match_special,
                                        const std::vector<std::pair<std::size_t, std::size_t>>& untrusted) const {
    std::vector<int64_t> out;
    std::size_t range = 0;          // first untrusted range that does not end before i
    std::size_t segment_start = 0;  // start of the text not yet encoded
    std::size_t i = 0;
    while (i < text.size()) {
      const AddedToken* match = nullptr;
      for (const std::size_t index : added_by_first_byte[static_cast<unsigned char>(text[i])]) {
        const AddedToken& candidate = added[index];
        if (candidate.special && !match_special) continue;
        if (candidate.special && range < untrusted.size() && untrusted[range].first < i + candidate.content.size())
          continue;  // overlaps untrusted text
        if (text.compare(i, candidate.content.size(), candidate.content) == 0) {
          match = &candidate;
          break;
        }
      }
      const auto advance_ranges = [&] {
        while (range < untrusted.size() && untrusted[range].second <= i) ++range;
      };
      if (match == nullptr) {
        ++i;
        advance_ranges();
        continue;
      }
      std::size_t before_end = i;
      if (match->lstrip) {
        while (before_end > segment_start && is_white_space(static_cast<unsigned char>(text[before_end - 1])))
          --before_end;
      }
      encode_plain(text.substr(segment_start, before_end - segment_start), segment_start == 0, out);
      out.push_back(match->id);
      i += match->content.size();
      if (match->rstrip) {
        while (i < text.size() && is_white_space(static_cast<unsigned char>(text[i]))) ++i;
      }
      segment_start = i;
      advance_ranges();
    }
    encode_plain(text.substr(segment_start), segment_start == 0, out);
    return out;
  }
};

namespace {

// A token named by tokenizer_config.json: a string or {"content": ...}.
int64_t config_token_id(const Json& config, const char* key, const HfTokenizer::Impl& impl, const std::string& where) {
  if (!config.is_object() || !config.contains(key) || config.at(key).is_null()) return -1;
  const Json& value = config.at(key);
  std::string content;
  if (value.is_string()) {
    content = value.get<std::string>();
  } else if (value.is_object() && value.contains("content") && value.at("content").is_string()) {
    content = value.at("content").get<std::string>();
  } else {
    throw Error(where + "." + key + ": expected a token string or {\"content\": ...}");
  }
  const auto found = impl.vocab.find(content);
  if (found == impl.vocab.end())
    throw Error(where + "." + key + ": token \"" + content + "\" is not in the vocabulary");
  return found->second;
}

void load_bpe_model(const Json& model, HfTokenizer::Impl& impl, const std::string& where) {
  const std::string type = model.contains("type") ? string_at(model, "type", where) : "BPE";
  if (type != "BPE") throw Error(where + ".type: model '" + type + "' is not supported (supported: BPE)");
  if (model.contains("dropout") && !model.at("dropout").is_null())
    throw Error(where + ".dropout: BPE dropout is for training tokenizers and is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model.at(key).is_null() &&
        !(model.at(key).is_string() && model.at(key).get<std::string>().empty()))
      throw Error(where + "." + key + ": a non-empty value is not supported");
  }
  const Json& vocab = require_key(model, "vocab", where);
  if (!vocab.is_object()) throw Error(where + ".vocab: expected an object of token -> id");
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_unsigned() || id.get<uint64_t>() >= kMaxTokenIds)
      throw Error(where + ".vocab[\"" + base::truncate_utf8(token, 40) + "\"]: expected an id in [0, " +
                  std::to_string(kMaxTokenIds) + ")");
    impl.vocab[token] = id.get<int64_t>();
  }
  impl.ignore_merges = bool_or(model, "ignore_merges", false, where);
  impl.byte_fallback = bool_or(model, "byte_fallback", false, where);
  impl.fuse_unk = bool_or(model, "fuse_unk", false, where);
  if (model.contains("unk_token") && !model.at("unk_token").is_null()) {
    const std::string unk = string_at(model, "unk_token", where);
    const auto found = impl.vocab.find(unk);
    if (found == impl.vocab.end()) throw Error(where + ".unk_token: \"" + unk + "\" is not in the vocabulary");
    impl.unk_id = found->second;
  }
  const Json& merges = require_key(model, "merges", where);
  if (!merges.is_array()) throw Error(where + ".merges: expected an array");
  impl.merges.reserve(merges.size());
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const Json& merge = merges[rank];
    const std::string at = where + ".merges[" + std::to_string(rank) + "]";
    std::string left, right;
    if (merge.is_string()) {
      const std::string text = merge.get<std::string>();
      const auto space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos)
        throw Error(at + ": expected \"left right\" (two tokens, one space)");
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      throw Error(at + ": expected \"left right\" or [\"left\", \"right\"]");
    }
    const auto a = impl.vocab.find(left);
    const auto b = impl.vocab.find(right);
    const auto merged = impl.vocab.find(left + right);
    if (a == impl.vocab.end() || b == impl.vocab.end() || merged == impl.vocab.end())
      throw Error(at + ": a token of the merge or its result is not in the vocabulary");
    // The first (lowest) rank of a pair wins, as in Hugging Face's loader.
    impl.merges.emplace(HfTokenizer::Impl::pair_key(a->second, b->second),
                        std::make_pair(static_cast<int32_t>(rank), merged->second));
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    const auto found = impl.vocab.find(name);
    impl.byte_token_ids[static_cast<std::size_t>(b)] = found == impl.vocab.end() ? -1 : found->second;
  }
}

}  // namespace

HfTokenizer HfTokenizer::from_json_text(const std::string& tokenizer_json, const std::string& config_json,
                                        const std::string& where) {
  const Json root = base::parse_json_limited(tokenizer_json, where + "/tokenizer.json");
  const std::string file = where + "/tokenizer.json";
  if (!root.is_object()) throw Error(file + ": expected a JSON object");
  auto impl = std::make_shared<Impl>();
  impl->where = file;
  load_bpe_model(require_key(root, "model", file), *impl, file + ": model");

  if (root.contains("added_tokens") && !root.at("added_tokens").is_null()) {
    const Json& list = root.at("added_tokens");
    if (!list.is_array()) throw Error(file + ": added_tokens: expected an array");
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string at = file + ": added_tokens[" + std::to_string(i) + "]";
      const Json& entry = list[i];
      AddedToken token;
      token.content = string_at(entry, "content", at);
      const Json& id = require_key(entry, "id", at);
      if (!id.is_number_unsigned() || id.get<uint64_t>() >= kMaxTokenIds)
        throw Error(at + ".id: expected an id in [0, " + std::to_string(kMaxTokenIds) + ")");
      token.id = id.get<int64_t>();
      token.special = bool_or(entry, "special", false, at);
      token.lstrip = bool_or(entry, "lstrip", false, at);
      token.rstrip = bool_or(entry, "rstrip", false, at);
      if (token.content.empty()) throw Error(at + ".content: an added token cannot be empty");
      if (!base::is_valid_utf8(token.content)) throw Error(at + ".content: not valid UTF-8");
      if (bool_or(entry, "single_word", false, at)) throw Error(at + ".single_word: true is not supported");
      if (bool_or(entry, "normalized", !token.special, at) && root.contains("normalizer") &&
          !root.at("normalizer").is_null())
        throw Error(at + ".normalized: true with a normalizer is not supported (matched on normalised text)");
      impl->vocab[token.content] = token.id;
      impl->added.push_back(std::move(token));
    }
  }
  int64_t size = 0;
  for (const auto& [token, id] : impl->vocab) size = std::max(size, id + 1);
  impl->id_to_token.assign(static_cast<std::size_t>(size), std::string());
  for (const auto& [token, id] : impl->vocab) impl->id_to_token[static_cast<std::size_t>(id)] = token;
  impl->added_id.assign(static_cast<std::size_t>(size), false);
  impl->special_id.assign(static_cast<std::size_t>(size), false);
  for (std::size_t i = 0; i < impl->added.size(); ++i) {
    const auto& token = impl->added[i];
    impl->id_to_token[static_cast<std::size_t>(token.id)] = token.content;
    impl->added_id[static_cast<std::size_t>(token.id)] = true;
    if (token.special) impl->special_id[static_cast<std::size_t>(token.id)] = true;
    impl->added_by_first_byte[static_cast<unsigned char>(token.content[0])].push_back(i);
  }
  for (auto& bucket : impl->added_by_first_byte) {
    std::stable_sort(bucket.begin(), bucket.end(), [&](std::size_t a, std::size_t b) {
      return impl->added[a].content.size() > impl->added[b].content.size();
    });
  }

  if (root.contains("normalizer") && !root.at("normalizer").is_null())
    impl->normalizer = make_normalizer(root.at("normalizer"), file + ": normalizer");
  if (root.contains("pre_tokenizer") && !root.at("pre_tokenizer").is_null())
    impl->pre_tokenizer = make_pre_tokenizer(root.at("pre_tokenizer"), file + ": pre_tokenizer");
  if (root.contains("decoder") && !root.at("decoder").is_null())
    impl->decoder = make_decoder(root.at("decoder"), file + ": decoder");

  if (!config_json.empty()) {
    const std::string config_file = where + "/tokenizer_config.json";
    const Json config = base::parse_json_limited(config_json, config_file);
    if (!config.is_object()) throw Error(config_file + ": expected a JSON object");
    impl->bos = config_token_id(config, "bos_token", *impl, config_file);
    impl->eos = config_token_id(config, "eos_token", *impl, config_file);
    impl->pad = config_token_id(config, "pad_token", *impl, config_file);
    impl->clean_up_spaces = bool_or(config, "clean_up_tokenization_spaces", false, config_file);
  }
  return HfTokenizer(std::move(impl));
}

const std::string& byte_level_char(std::uint8_t byte) {
  return byte_map().to_char[byte];
}

HfTokenizer HfTokenizer::load(const std::string& directory) {
  const std::filesystem::path dir(directory);
  std::error_code error;
  if (!std::filesystem::exists(dir / "tokenizer.json", error))
    throw Error(directory + ": no tokenizer.json (a Hugging Face model directory has one)");
  const auto config_path = dir / "tokenizer_config.json";
  const std::string config =
      std::filesystem::exists(config_path, error) ? base::read_small_file(config_path) : std::string();
  auto tokenizer = from_json_text(base::read_small_file(dir / "tokenizer.json"), config, directory);
  const auto generation_path = dir / "generation_config.json";
  if (!std::filesystem::exists(generation_path, error)) return tokenizer;
  const auto generation = base::parse_json_limited(base::read_small_file(generation_path), generation_path.string());
  if (!generation.is_object()) throw Error(generation_path.string() + ": expected a JSON object");
  auto impl = std::make_shared<Impl>(*tokenizer.impl_);
  const auto add_stop = [&](const Json& id) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= tokenizer.vocab_size())
      throw Error(generation_path.string() + ": eos_token_id " + base::dump_json(id) +
                  " is not an id of the tokenizer (0 to " + std::to_string(tokenizer.vocab_size() - 1) + ")");
    if (std::find(impl->stop.begin(), impl->stop.end(), id.get<int64_t>()) == impl->stop.end())
      impl->stop.push_back(id.get<int64_t>());
  };
  if (generation.contains("eos_token_id") && !generation.at("eos_token_id").is_null()) {
    const auto& ids = generation.at("eos_token_id");
    if (ids.is_array()) {
      for (const auto& id : ids) add_stop(id);
    } else {
      add_stop(ids);
    }
  }
  // A tokenizer_config.json without eos_token: the first stop id is EOS.
  if (impl->eos < 0 && !impl->stop.empty()) impl->eos = impl->stop.front();
  return HfTokenizer(std::move(impl));
}

std::vector<int64_t> HfTokenizer::encode(std::string_view text) const {
  return impl_->encode(text, false);
}

std::vector<int64_t> HfTokenizer::encode_with_special_tokens(std::string_view text) const {
  return impl_->encode(text, true);
}

std::vector<int64_t> HfTokenizer::encode_template(const std::vector<std::string_view>& parts) const {
  std::string text;
  std::vector<std::pair<std::size_t, std::size_t>> untrusted;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const auto begin = text.size();
    // Each part on its own: the ranges must index the sanitised text.
    text += base::replace_invalid_utf8(parts[i]);
    if (i % 2 == 1 && text.size() > begin) untrusted.emplace_back(begin, text.size());
  }
  return impl_->encode_sanitised(text, true, untrusted);
}

std::string HfTokenizer::decode(const std::vector<int64_t>& ids, bool skip_special) const {
  std::vector<DecodeToken> tokens;
  tokens.reserve(ids.size());
  for (const int64_t id : ids) {
    if (id < 0 || id >= vocab_size())
      throw Error("decode: id " + std::to_string(id) + " is outside the vocabulary [0, " +
                  std::to_string(vocab_size()) + ")");
    const auto index = static_cast<std::size_t>(id);
    if (skip_special && impl_->special_id[index]) continue;
    tokens.push_back({impl_->id_to_token[index], impl_->added_id[index]});
  }
  std::string text;
  if (impl_->decoder) {
    for (const auto& token : (*impl_->decoder)(std::move(tokens))) text += token.text;
  } else {
    for (std::size_t i = 0; i < tokens.size(); ++i) text += (i == 0 ? "" : " ") + tokens[i].text;
  }
  return impl_->clean_up_spaces ? clean_up_tokenization(std::move(text)) : text;
}

int64_t HfTokenizer::vocab_size() const {
  return static_cast<int64_t>(impl_->id_to_token.size());
}
int64_t HfTokenizer::bos_id() const {
  return impl_->bos;
}
int64_t HfTokenizer::eos_id() const {
  return impl_->eos;
}
int64_t HfTokenizer::pad_id() const {
  return impl_->pad;
}
std::vector<int64_t> HfTokenizer::stop_ids() const {
  if (impl_->eos < 0) return impl_->stop;
  std::vector<int64_t> ids = {impl_->eos};
  for (const auto id : impl_->stop)
    if (id != impl_->eos) ids.push_back(id);
  return ids;
}

std::optional<int64_t> HfTokenizer::special_id(std::string_view name) const {
  for (const auto& token : impl_->added) {
    if (token.content == name) return token.id;
  }
  return std::nullopt;
}

bool HfTokenizer::is_special(int64_t id) const {
  return id >= 0 && id < vocab_size() && impl_->special_id[static_cast<std::size_t>(id)];
}

const std::string& HfTokenizer::token(int64_t id) const {
  if (id < 0 || id >= vocab_size()) throw Error("token: id " + std::to_string(id) + " is outside the vocabulary");
  return impl_->id_to_token[static_cast<std::size_t>(id)];
}

std::optional<int64_t> HfTokenizer::token_id(std::string_view token) const {
  const auto found = impl_->vocab.find(std::string(token));
  if (found == impl_->vocab.end()) return std::nullopt;
  return found->second;
}

}  // namespace sao::tokenizer
