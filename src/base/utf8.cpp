// UTF-8 validation by the RFC 3629 table; see utf8.hpp.
#include "base/utf8.hpp"

#include <cstdio>

namespace sao::base {

namespace {

// What starts at text[i]: `length` bytes of a well-formed sequence (RFC
// 3629, section 4, "UTF8-octets"), or, when `valid` is false, a maximal
// subpart of `length` bytes to replace by one U+FFFD (Unicode 15, section
// 3.9, "U+FFFD substitution of maximal subparts"; what WHATWG's TextDecoder
// and Rust's from_utf8_lossy do, so text read here matches the Hugging Face
// stack's). A truncated sequence is one subpart, a stray byte is one each.
struct Scan {
  bool valid;
  std::size_t length;
};

Scan scan(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  if (lead < 0x80) return {true, 1};
  std::size_t length = 0;
  unsigned char min_second = 0x80;
  unsigned char max_second = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) min_second = 0xA0;  // no overlong forms
    if (lead == 0xED) max_second = 0x9F;  // no UTF-16 surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) min_second = 0x90;  // no overlong forms
    if (lead == 0xF4) max_second = 0x8F;  // nothing above U+10FFFF
  } else {
    return {false, 1};
  }
  std::size_t taken = 1;
  while (taken < length && i + taken < text.size()) {
    const unsigned char next = byte(i + taken);
    if (next < (taken == 1 ? min_second : 0x80) || next > (taken == 1 ? max_second : 0xBF)) break;
    ++taken;
  }
  return {taken == length, taken};
}

std::size_t sequence_length(std::string_view text, std::size_t i) {
  const Scan found = scan(text, i);
  return found.valid ? found.length : 0;
}

}  // namespace

std::size_t utf8_prefix_length(std::string_view text, std::size_t max_bytes) {
  std::size_t end = 0;
  while (end < text.size()) {
    const std::size_t length = sequence_length(text, end);
    const std::size_t step = length == 0 ? 1 : length;
    if (end + step > max_bytes) break;
    end += step;
  }
  return end;
}

std::string truncate_utf8(std::string_view text, std::size_t max_bytes, std::string_view ellipsis) {
  if (text.size() <= max_bytes) return std::string(text);
  std::string out(text.substr(0, utf8_prefix_length(text, max_bytes)));
  out += ellipsis;
  return out;
}

std::string replace_invalid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t length = sequence_length(text, i);
    if (length == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      i += scan(text, i).length;
    } else {
      out.append(text.substr(i, length));
      i += length;
    }
  }
  return out;
}

std::string encode_utf8(unsigned code_point) {
  std::string out;
  if (code_point < 0x80) {
    out += static_cast<char>(code_point);
  } else if (code_point < 0x800) {
    out += static_cast<char>(0xC0 | (code_point >> 6));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  } else if (code_point < 0x10000) {
    out += static_cast<char>(0xE0 | (code_point >> 12));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (code_point >> 18));
    out += static_cast<char>(0x80 | ((code_point >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  }
  return out;
}

bool is_valid_utf8(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t length = sequence_length(text, i);
    if (length == 0) return false;
    i += length;
  }
  return true;
}

std::string quoted_excerpt(std::string_view text, std::size_t max_bytes) {
  return "'" + truncate_utf8(text, max_bytes) + "'";
}

std::string quoted_byte(char byte) {
  const auto value = static_cast<unsigned char>(byte);
  if (value >= 0x20 && value < 0x7f) return std::string("'") + byte + "'";
  char hex[16];
  std::snprintf(hex, sizeof(hex), "byte 0x%02X", value);
  return hex;
}

}  // namespace sao::base
