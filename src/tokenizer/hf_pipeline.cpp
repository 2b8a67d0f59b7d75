// tokenizer.json's normalizers, pre-tokenizers and decoders; see
// hf_pipeline.hpp.
#include "tokenizer/hf_pipeline.hpp"
#include "tokenizer/hf_tokenizer.hpp"

#include "base/error.hpp"
#include "base/unicode_regex.hpp"
#include "base/utf8.hpp"

#include <utf8proc.h>

#include <array>
#include <cstdlib>
#include <memory>
#include <optional>
#include <unordered_map>

namespace sao::tokenizer::hf {

using Json = nlohmann::json;

// ---- small helpers ---------------------------------------------------------

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

// The size of `text` once every `from` in it is replaced by `to`.
std::size_t replaced_size(std::string_view text, std::string_view from, std::string_view to) {
  if (from.empty() || to.size() <= from.size()) return text.size();
  std::size_t count = 0;
  for (std::size_t at = text.find(from); at != std::string_view::npos; at = text.find(from, at + from.size())) ++count;
  return text.size() + count * (to.size() - from.size());
}

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

Normalizer make_normalizer(const Json& config, const std::string& where, PipelineShape& shape) {
  const std::string type = string_at(config, "type", where);
  shape.add_step(where);
  if (type == "Sequence") {
    shape.enter_sequence(where);
    std::vector<Normalizer> steps;
    const Json& list = require_key(config, "normalizers", where);
    if (!list.is_array()) throw Error(where + ".normalizers: expected an array");
    for (std::size_t i = 0; i < list.size(); ++i)
      steps.push_back(make_normalizer(list[i], where + ".normalizers[" + std::to_string(i) + "]", shape));
    --shape.depth;
    return [steps](std::string text, const OutputBound& bound) {
      for (const auto& step : steps) text = step(std::move(text), bound);
      return text;
    };
  }
  const auto normal_form = [where](utf8proc_option_t options) -> Normalizer {
    return [where, options](const std::string& text, const OutputBound& bound) {
      std::string out = unicode_normal_form(text, options);
      bound.check(out.size(), where);
      return out;
    };
  };
  if (type == "NFC") return normal_form(UTF8PROC_COMPOSE);
  if (type == "NFD") return normal_form(UTF8PROC_DECOMPOSE);
  if (type == "NFKC") return normal_form(static_cast<utf8proc_option_t>(UTF8PROC_COMPOSE | UTF8PROC_COMPAT));
  if (type == "NFKD") return normal_form(static_cast<utf8proc_option_t>(UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT));
  if (type == "Prepend") {
    const std::string prefix = string_at(config, "prepend", where);
    return [prefix, where](std::string text, const OutputBound& bound) {
      if (text.empty()) return text;
      bound.check(prefix.size() + text.size(), where);
      return prefix + text;
    };
  }
  if (type == "Replace") {
    const Pattern pattern = Pattern::from_json(require_key(config, "pattern", where), where + ".pattern");
    const std::string content = string_at(config, "content", where);
    return [pattern, content, where](const std::string& text, const OutputBound& bound) {
      std::string out;
      std::size_t last = 0;
      for (const auto& [begin, end] : pattern.find_all(text)) {
        bound.check(out.size() + (begin - last) + content.size(), where);
        out.append(text, last, begin - last);
        out += content;
        last = end;
      }
      bound.check(out.size() + (text.size() - last), where);
      out.append(text, last, std::string::npos);
      return out;
    };
  }
  throw Error(where + ".type: normalizer '" + type +
              "' is not supported (supported: Sequence, NFC, NFD, NFKC, NFKD, Prepend, Replace)");
}

// ---- pre-tokenizers --------------------------------------------------------

// Splits each piece at `pattern`'s matches; "Isolated" keeps matches and the
// text between as separate pieces, "Removed" drops the matches. With
// `invert`, the roles of matches and the text between swap.
PreTokenizer make_split(Pattern pattern, bool keep_delimiters, bool invert) {
  return [pattern = std::move(pattern), keep_delimiters, invert](std::vector<Piece> pieces, const OutputBound&) {
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
  return [add_prefix_space, split, where](std::vector<Piece> pieces, const OutputBound& bound) {
    if (add_prefix_space) {
      for (auto& piece : pieces) {
        if (piece.text.empty() || piece.text[0] != ' ') piece.text.insert(0, " ");
      }
    }
    if (split) pieces = (*split)(std::move(pieces), bound);
    const auto& map = byte_map();
    std::size_t total = 0;  // each byte becomes 1 or 2: a Sequence of ByteLevels doubles the text each time
    for (auto& piece : pieces) {
      std::string mapped;
      mapped.reserve(piece.text.size() * 2);
      for (const char c : piece.text) mapped += map.to_char[static_cast<unsigned char>(c)];
      total += mapped.size();
      bound.check(total, where);
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
  return [replacement, scheme, split, where](std::vector<Piece> pieces, const OutputBound& bound) {
    std::vector<Piece> out;
    std::size_t total = 0;
    for (auto& piece : pieces) {
      total += replaced_size(piece.text, " ", replacement) + replacement.size();
      bound.check(total, where);
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

PreTokenizer make_pre_tokenizer(const Json& config, const std::string& where, PipelineShape& shape) {
  const std::string type = string_at(config, "type", where);
  shape.add_step(where);
  if (type == "Sequence") {
    shape.enter_sequence(where);
    std::vector<PreTokenizer> steps;
    const Json& list = require_key(config, "pretokenizers", where);
    if (!list.is_array()) throw Error(where + ".pretokenizers: expected an array");
    for (std::size_t i = 0; i < list.size(); ++i)
      steps.push_back(make_pre_tokenizer(list[i], where + ".pretokenizers[" + std::to_string(i) + "]", shape));
    --shape.depth;
    return [steps](std::vector<Piece> pieces, const OutputBound& bound) {
      for (const auto& step : steps) pieces = step(std::move(pieces), bound);
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

Decoder make_decoder(const Json& config, const std::string& where, PipelineShape& shape) {
  const std::string type = string_at(config, "type", where);
  shape.add_step(where);
  if (type == "Sequence") {
    shape.enter_sequence(where);
    std::vector<Decoder> steps;
    const Json& list = require_key(config, "decoders", where);
    if (!list.is_array()) throw Error(where + ".decoders: expected an array");
    for (std::size_t i = 0; i < list.size(); ++i)
      steps.push_back(make_decoder(list[i], where + ".decoders[" + std::to_string(i) + "]", shape));
    --shape.depth;
    return [steps](std::vector<DecodeToken> tokens, const OutputBound& bound) {
      for (const auto& step : steps) tokens = step(std::move(tokens), bound);
      return tokens;
    };
  }
  if (type == "ByteLevel") {
    // Runs of ordinary tokens are joined and mapped back to bytes, then read
    // as UTF-8 (invalid sequences become U+FFFD); added tokens stay verbatim.
    return [](std::vector<DecodeToken> tokens, const OutputBound&) {
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
    return [pattern, content, where](std::vector<DecodeToken> tokens, const OutputBound& bound) {
      std::size_t total = 0;
      for (auto& token : tokens) {
        total += replaced_size(token.text, pattern.literal, content);
        bound.check(total, where);
        replace_all(token.text, pattern.literal, content);
      }
      return tokens;
    };
  }
  if (type == "ByteFallback") {
    // Consecutive <0xXX> tokens become their bytes: one string when they
    // are valid UTF-8, else one U+FFFD per byte.
    return [](std::vector<DecodeToken> tokens, const OutputBound&) {
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
    return [](std::vector<DecodeToken> tokens, const OutputBound&) {
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
    return [content, start, stop](std::vector<DecodeToken> tokens, const OutputBound&) {
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
    return [replacement, scheme](std::vector<DecodeToken> tokens, const OutputBound&) {
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

}  // namespace sao::tokenizer::hf

namespace sao::tokenizer {

const std::string& byte_level_char(std::uint8_t byte) {
  return hf::byte_map().to_char[byte];
}

}  // namespace sao::tokenizer
