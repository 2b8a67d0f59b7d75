// Regular expressions over UTF-8 with Unicode properties, for the split
// patterns of Hugging Face tokenizer.json files. Why PCRE2 (Debian
// libpcre2-dev) rather than std::regex: std::regex has no \p{L}, no Unicode
// classes and no lookahead over code points, and hand-writing a regex engine
// is exactly what the project prefers a library for (docs/decisions.md).
// The patterns are written for Oniguruma (the Rust `tokenizers` crate's
// engine); translate_oniguruma_pattern maps the constructs whose meaning
// differs between the two before PCRE2 compiles them.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sao::tokenizer {

// `pattern` with Oniguruma's meanings made explicit for PCRE2: \s and \S are
// Unicode White_Space (PCRE2's \s lacks U+0085), \h and \H are hexadecimal
// digits (PCRE2's are horizontal space). Throws sao::Error naming `where`
// for a construct it cannot translate (\S inside a bracket class).
std::string translate_oniguruma_pattern(std::string_view pattern, const std::string& where);

class UnicodeRegex {
 public:
  // Compiles `pattern` (Oniguruma syntax) in PCRE2's UTF and UCP modes,
  // JIT-compiled where the platform allows. Throws sao::Error naming `where`
  // and the position PCRE2 reports when the pattern does not compile.
  UnicodeRegex(std::string_view pattern, const std::string& where);

  // Byte ranges [begin, end) of the successive non-overlapping matches in
  // `text`, which must be valid UTF-8 (callers replace invalid bytes first).
  // An empty match is skipped and the search moves on by one character.
  // Thread-safe: each call has its own match state.
  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view text) const;

 private:
  struct Compiled;
  std::shared_ptr<const Compiled> compiled_;
  std::string where_;
};

}  // namespace sao::tokenizer
