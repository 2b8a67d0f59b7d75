// Regular expressions over UTF-8 with Unicode properties: the split patterns
// of Hugging Face tokenizer.json files, and the dataset task's regex verifier. Why PCRE2 (Debian
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

namespace sao::base {

// `pattern` with Oniguruma's meanings made explicit for PCRE2: \s and \S are
// Unicode White_Space (PCRE2's \s lacks U+0085), \h and \H are hexadecimal
// digits (PCRE2's are horizontal space). Throws sao::Error naming `where`
// for a construct it cannot translate (\S inside a bracket class).
std::string translate_oniguruma_pattern(std::string_view pattern, const std::string& where);

enum class RegexSyntax {
  kOniguruma,  // tokenizer.json patterns (translated first)
  kPcre2,      // patterns users write (docs/environments.md: PCRE2 = Perl syntax)
};

class UnicodeRegex {
 public:
  // Compiles `pattern` in PCRE2's UTF and UCP modes, JIT-compiled where the
  // platform allows. Throws sao::Error naming `where` and the position PCRE2
  // reports when the pattern does not compile (or is not valid UTF-8).
  UnicodeRegex(std::string_view pattern, const std::string& where, RegexSyntax syntax = RegexSyntax::kOniguruma);

  // True when the pattern matches all of `text` (valid UTF-8). PCRE2's match
  // limit bounds a pattern that backtracks catastrophically: exceeding it
  // throws sao::Error naming `where` rather than running for hours.
  bool matches_whole(std::string_view text) const;

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

}  // namespace sao::base
