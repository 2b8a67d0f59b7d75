// UTF-8 hygiene for text that came from outside (environment replies, error
// messages, prompts) before it is shown or serialised. nlohmann's dump()
// throws on invalid UTF-8, so one bad byte in an env's error message used to
// turn a status page into a 503; and cutting a message at a byte count can
// split a character and make a valid string invalid.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace sao::base {

// Length in bytes of the longest prefix of `text` that is at most
// `max_bytes` long and does not end inside a UTF-8 sequence. Invalid bytes
// count as one-byte characters (they are replaced later, never split).
std::size_t utf8_prefix_length(std::string_view text, std::size_t max_bytes);

// `text` cut to at most `max_bytes` bytes on a character boundary, with
// `ellipsis` appended when anything was cut (the ellipsis is not counted).
std::string truncate_utf8(std::string_view text, std::size_t max_bytes, std::string_view ellipsis = "...");
// The text in single quotes, cut to `max_bytes` on a character boundary: how
// an error message shows input it refuses.
std::string quoted_excerpt(std::string_view text, std::size_t max_bytes = 200);

// One byte as an error message shows it: printable ASCII quoted ('x'), any
// other byte as "byte 0xNN" (a lone byte of a UTF-8 character would make the
// message invalid text).
std::string quoted_byte(char byte);

// `text` with the bytes that are not part of a well-formed UTF-8 sequence
// (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF) replaced by
// U+FFFD, one per maximal subpart (a truncated sequence is one, a stray byte
// is one each), as WHATWG's TextDecoder does. Valid text comes back unchanged.
std::string replace_invalid_utf8(std::string_view text);

// The UTF-8 bytes of one code point (at most U+10FFFF; callers pass
// scalar values, not surrogates).
std::string encode_utf8(unsigned code_point);

// True when `text` is well-formed UTF-8.
bool is_valid_utf8(std::string_view text);

}  // namespace sao::base
