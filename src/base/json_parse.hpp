// Parsing JSON that comes from outside the program (checkpoint headers,
// config files) with limits on nesting depth and size. nlohmann's own parser
// is iterative, but printing, comparing and walking a value recurse per level,
// so a document nested 10^5 levels deep (a few hundred kilobytes of "[[[[")
// overflows the stack the first time anything touches it; a depth limit far
// above any real config keeps every later step safe.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <string_view>

namespace sao::base {

inline constexpr std::size_t kDefaultJsonMaxDepth = 256;
inline constexpr std::size_t kDefaultJsonMaxBytes = 64ull * 1024 * 1024;

// Parses `text` as one JSON value (nothing but whitespace may follow it).
// Throws sao::Error starting with `where`, e.g.
//   "checkpoint run/sft/config.json: JSON nested deeper than 256 levels at byte 256"
//   "checkpoint run/sft/config.json: not valid JSON at byte 17: <what the parser said>"
//   "checkpoint run/sft/config.json: JSON text is 70000000 bytes, over the limit of 67108864"
// Nesting depth counts open arrays and objects: "[]" is depth 1, "{"a":[1]}" depth 2.
nlohmann::json parse_json_limited(std::string_view text, const std::string& where,
                                  std::size_t max_depth = kDefaultJsonMaxDepth,
                                  std::size_t max_bytes = kDefaultJsonMaxBytes);

// Serialises `value` as nlohmann's dump(indent) does, except that invalid
// UTF-8 inside strings becomes U+FFFD instead of throwing: text from
// outside (an env's error message, a prompt) must never make a status page
// or a metrics line fail. Every JSON the program writes goes through here.
std::string dump_json(const nlohmann::json& value, int indent = -1);

}  // namespace sao::base
