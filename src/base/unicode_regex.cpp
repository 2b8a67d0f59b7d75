// PCRE2 behind UnicodeRegex; see unicode_regex.hpp.
#include "base/unicode_regex.hpp"

#include "base/error.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace sao::base {

namespace {

// Unicode White_Space, which Oniguruma's \s matches in UTF-8 mode, as the
// inside of a PCRE2 bracket class.
constexpr std::string_view kWhiteSpace =
    "\\x{9}-\\x{d}\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}";
constexpr std::string_view kHexDigit = "0-9A-Fa-f";

}  // namespace

std::string translate_oniguruma_pattern(std::string_view pattern, const std::string& where) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[++i];
      const bool space = next == 's' || next == 'S';
      const bool hex = next == 'h' || next == 'H';
      if (!space && !hex) {
        out += c;
        out += next;
        continue;
      }
      const std::string_view set = space ? kWhiteSpace : kHexDigit;
      const bool negated = next == 'S' || next == 'H';
      if (in_class && negated) {
        throw Error(where + ": \\" + std::string(1, next) +
                    " inside a bracket class is not supported (its Oniguruma meaning has no PCRE2 spelling)");
      }
      if (in_class) {
        out += set;
      } else {
        out += negated ? "[^" : "[";
        out += set;
        out += ']';
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (in_class && c == '[') {
      throw Error(where + ": nested bracket classes are not supported");
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

struct UnicodeRegex::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

UnicodeRegex::UnicodeRegex(std::string_view pattern, const std::string& where, RegexSyntax syntax) : where_(where) {
  // A user's pattern is checked for valid UTF-8 by PCRE2; a translated one
  // came from a JSON string, which is valid already.
  const bool translate = syntax == RegexSyntax::kOniguruma;
  const std::string translated = translate ? translate_oniguruma_pattern(pattern, where) : std::string(pattern);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  auto compiled = std::make_shared<Compiled>();
  compiled->code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                    PCRE2_UTF | PCRE2_UCP | (translate ? PCRE2_NO_UTF_CHECK : 0u), &error_code, &error_offset, nullptr);
  if (compiled->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    throw Error(where + ": the pattern does not compile (PCRE2 at offset " + std::to_string(error_offset) + " of \"" +
                translated + "\": " + reinterpret_cast<const char*>(message) + ")");
  }
  // JIT makes matching several times faster; where it is unavailable the
  // interpreter gives the same matches.
  pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE);
  compiled_ = std::move(compiled);
}

std::vector<std::pair<std::size_t, std::size_t>> UnicodeRegex::find_all(std::string_view text) const {
  std::vector<std::pair<std::size_t, std::size_t>> matches;
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
      pcre2_match_data_create_from_pattern(compiled_->code, nullptr), &pcre2_match_data_free);
  if (!data) throw Error(where_ + ": out of memory for regex match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t start = 0;
  while (start <= text.size()) {
    const int rc = pcre2_match(compiled_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, data.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      throw Error(where_ + ": matching failed (" + std::string(reinterpret_cast<const char*>(message)) + ")");
    }
    const PCRE2_SIZE* offsets = pcre2_get_ovector_pointer(data.get());
    const std::size_t begin = offsets[0];
    const std::size_t end = offsets[1];
    if (end > begin) {
      matches.emplace_back(begin, end);
      start = end;
      continue;
    }
    // An empty match: step over one whole character.
    start = begin + 1;
    while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) ++start;
  }
  return matches;
}

bool UnicodeRegex::matches_whole(std::string_view text) const {
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
      pcre2_match_data_create_from_pattern(compiled_->code, nullptr), &pcre2_match_data_free);
  if (!data) throw Error(where_ + ": out of memory for regex match data");
  const int rc = pcre2_match(compiled_->code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0,
                             PCRE2_ANCHORED | PCRE2_ENDANCHORED, data.get(), nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(rc, message, sizeof(message));
    throw Error(where_ + ": matching failed (" + std::string(reinterpret_cast<const char*>(message)) + ")");
  }
  return true;
}

}  // namespace sao::base
