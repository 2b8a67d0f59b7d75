// Depth- and size-limited JSON parsing (base/json_parse.hpp): documents from
// outside the program must never overflow the stack or exhaust memory, and
// every refusal names the source, the byte and the limit.
#include "base/error.hpp"
#include "base/json_parse.hpp"

#include <doctest/doctest.h>

#include <string>

using sao::base::parse_json_limited;

namespace {
std::string error_of(const std::string& text, size_t max_depth = sao::base::kDefaultJsonMaxDepth,
                     size_t max_bytes = sao::base::kDefaultJsonMaxBytes) {
  try {
    parse_json_limited(text, "config x.json", max_depth, max_bytes);
  } catch (const sao::Error& error) {
    return error.what();
  }
  return "no error";
}

std::string nested_arrays(size_t levels) {
  return std::string(levels, '[') + std::string(levels, ']');
}
}  // namespace

TEST_CASE("valid JSON parses to the same value nlohmann gives") {
  const std::string text = R"({"a": [1, 2.5, "x", null, true, {"b": {}}], "c": -3})";
  CHECK(parse_json_limited(text, "t") == nlohmann::json::parse(text));
  CHECK(parse_json_limited("  7  ", "t") == 7);
}

TEST_CASE("nesting deeper than the limit names the byte and the limit") {
  CHECK(parse_json_limited(nested_arrays(3), "t", 3) == nlohmann::json::parse(nested_arrays(3)));
  CHECK(error_of(nested_arrays(4), 3) == "config x.json: JSON nested deeper than 3 levels at byte 4");
  CHECK(error_of(R"({"a": {"b": [ [1]]}})", 3) == "config x.json: JSON nested deeper than 3 levels at byte 15");
  // 10^5 levels, the size that overflowed the stack, at the default limit.
  CHECK(error_of(nested_arrays(100000)) == "config x.json: JSON nested deeper than 256 levels at byte 257");
  std::string objects;
  for (int i = 0; i < 100000; ++i) objects += R"({"k":)";
  objects += "0" + std::string(100000, '}');
  CHECK(error_of(objects) == "config x.json: JSON nested deeper than 256 levels at byte 1281");
}

TEST_CASE("text over the size limit is refused before parsing") {
  CHECK(error_of("[1, 2, 3]", 256, 8) == "config x.json: JSON text is 9 bytes, over the limit of 8");
  CHECK(parse_json_limited("[1,2,3]", "t", 256, 7) == nlohmann::json::array({1, 2, 3}));
}

TEST_CASE("syntax errors name the source and the byte") {
  CHECK(error_of("{oops") ==
        "config x.json: not valid JSON at byte 2: [json.exception.parse_error.101] parse error at line 1, column 2: "
        "syntax error while parsing object key - invalid literal; last read: '{o'; expected string literal");
  CHECK(error_of("[1] x").rfind("config x.json: not valid JSON at byte 5: ", 0) == 0);
  CHECK(error_of("").rfind("config x.json: not valid JSON at byte 1: ", 0) == 0);
}
