// A chat template comes with a downloaded model directory: untrusted input.
// Each hostile template of issue 47 (and one of each class around it) ends
// in a sao::Error that names the template, the line and the limit, never in
// a signal, a hang or a wrong number; the limits sit far above what real
// templates use, so ordinary arithmetic near them still renders as Python's.
#include "tokenizer/chat_template/chat_template.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <string>

namespace {

using sao::tokenizer::ChatTemplate;

std::string render(const std::string& source) {
  return ChatTemplate::parse(source, "t").render(nlohmann::ordered_json::object());
}

std::string error_of(const std::string& source) {
  try {
    return "no error: " + render(source);
  } catch (const std::exception& error) {
    return error.what();
  }
}

// A list nested `depth` deep, built by the template itself.
std::string nested_list(int depth) {
  return "{% set ns = namespace(x=[]) %}{% for i in range(" + std::to_string(depth) +
         ") %}{% set ns.x = [ns.x] %}{% endfor %}";
}

}  // namespace

TEST_CASE("integer arithmetic is checked: overflow is an error naming the operation, never SIGFPE") {
  CHECK(error_of("{{ (-9223372036854775807 - 1) // -1 }}") ==
        "t: line 1: integer overflow in '//': -9223372036854775808 // -1 does not fit in 64 bits");
  CHECK(render("{{ (-9223372036854775807 - 1) % -1 }}") == "0");  // Python: 0, no trap
  CHECK(render(
            "{{ 7 // -1 }} {{ -7 % -1 }} {{ (-9223372036854775807 - 1) // 2 }} {{ (-9223372036854775807 - 1) % 3 }}") ==
        "-7 0 -4611686018427387904 1");
  CHECK(error_of("{{ 9223372036854775807 + 1 }}") ==
        "t: line 1: integer overflow in '+': 9223372036854775807 + 1 does not fit in 64 bits");
  CHECK(error_of("{{ -9223372036854775807 - 2 }}") ==
        "t: line 1: integer overflow in '-': -9223372036854775807 - 2 does not fit in 64 bits");
  CHECK(error_of("x\n{{ 4294967296 * 4294967296 }}") ==
        "t: line 2: integer overflow in '*': 4294967296 * 4294967296 does not fit in 64 bits");
  CHECK(error_of("{{ -(-9223372036854775807 - 1) }}") ==
        "t: line 1: integer overflow in unary '-': -(-9223372036854775808) does not fit in 64 bits");
  CHECK(error_of("{{ (-9223372036854775807 - 1) | abs }}") ==
        "t: line 1: integer overflow in abs: abs(-9223372036854775808) does not fit in 64 bits");
  CHECK(render("{{ 9223372036854775806 + 1 }} {{ -9223372036854775807 - 1 }} {{ 3037000499 * 3037000499 }}") ==
        "9223372036854775807 -9223372036854775808 9223372030926249001");
}

TEST_CASE("** is Python's power: exact integers, checked, floats for negative exponents") {
  CHECK(render("{{ 2 ** 62 }} {{ -2 ** 2 }} {{ 2 ** 3 ** 2 }} {{ 2 ** -1 }} {{ 1 ** 9223372036854775807 }}") ==
        "4611686018427387904 4 64 0.5 1");
  CHECK(error_of("{{ 2 ** 63 }}") == "t: line 1: integer overflow in '**': 2 ** 63 does not fit in 64 bits");
  CHECK(error_of("{{ 0 ** -1 }}") == "t: line 1: division by zero (0 to a negative power)");
  CHECK(error_of("{{ 10.0 ** 400 }}") == "t: line 1: float overflow in '**': 10.0 ** 400.0");
}

TEST_CASE("range() and slices take any 64-bit bounds and steps without overflowing") {
  CHECK(error_of("{{ range(-9223372036854775807 - 1, 9223372036854775807) | length }}") ==
        "t: line 1: range of more than 100000 items");
  CHECK(render("{{ range(9223372036854775805, 9223372036854775807, 2) | list }}") == "[9223372036854775805]");
  CHECK(render("{{ range(9223372036854775806, 9223372036854775807, 9223372036854775807) | list }}") ==
        "[9223372036854775806]");
  CHECK(render("{{ range(-9223372036854775807 - 1, 0, -9223372036854775807 - 1) | list }}") == "[]");
  CHECK(render("{{ range(3, 0, -9223372036854775807 - 1) | list }}") == "[3]");
  CHECK(render("{{ 'abc'[2::9223372036854775807] }}|{{ [1, 2, 3][-9223372036854775807 - 1:9223372036854775807] }}") ==
        "c|[1, 2, 3]");
  CHECK(render("{{ 'abc'[::-9223372036854775807 - 1] }}|{{ [1, 2, 3][1::9223372036854775807] }}") == "c|[2]");
}

TEST_CASE("repetition and conversions: Python's results, or an error where the result cannot be held") {
  CHECK(render("{{ 'ab' * 3 }}|{{ 2 * 'ab' }}|{{ [1] * 3 }}|{{ 'ab' * -1 }}") == "ababab|abab|[1, 1, 1]|");
  CHECK(error_of("{{ 'ab' * 9223372036854775807 }}") ==
        "t: line 1: '*' would make a string of more than 67108864 bytes");
  CHECK(error_of("{{ [1, 2] * 9223372036854775807 }}") == "t: line 1: the template runs more than 1000000 steps");
  CHECK(render("{{ ' 42 ' | int }} {{ '1.5' | int }} {{ '12abc' | int }} {{ 'x' | int }} {{ 3.9 | int }} {{ -3.9 | int "
               "}}") == "42 1 0 0 3 -3");
  CHECK(render("{{ '1.5' | float }} {{ 'x' | float }} {{ 2 | float }}") == "1.5 0.0 2.0");
  CHECK(error_of("{{ '99999999999999999999' | int }}") ==
        "t: line 1: int: '99999999999999999999' does not fit in 64 bits");
  CHECK(error_of("{{ (10.0 ** 300) | int }}") == "t: line 1: int: 1e+300 does not fit in 64 bits");
  CHECK(error_of("{{ [1] | tojson(indent=9223372036854775807) }}") ==
        "t: line 1: tojson: indent 9223372036854775807 is over the limit of 1024");
  CHECK(error_of("{{ 'a\\nb' | indent(9223372036854775807) }}") ==
        "t: line 1: indent: width 9223372036854775807 is over the limit of 1024");
  CHECK(render("{{ 'a\\nb' | indent(2) }}|{{ [1] | tojson(indent=1) }}") == "a\n  b|[\n 1\n]");
}

TEST_CASE("nesting is bounded: filter chains, operator chains, nested data, cycles") {
  std::string chain = "{{ 'x'";
  for (int i = 0; i < 100000; ++i) chain += "|trim";
  CHECK(error_of(chain + " }}") == "t: line 1: expressions nest deeper than 200");
  std::string sum = "{{ 0";
  for (int i = 0; i < 100000; ++i) sum += " + 1";
  CHECK(error_of(sum + " }}") == "t: line 1: expressions nest deeper than 200");
  std::string attributes = "{{ x";
  for (int i = 0; i < 100000; ++i) attributes += ".a";
  CHECK(error_of(attributes + " }}") == "t: line 1: expressions nest deeper than 200");
  std::string short_chain = "{{ ' x '";
  for (int i = 0; i < 150; ++i) short_chain += "|trim";
  CHECK(render(short_chain + " }}") == "x");

  // A list nested 10^5 deep is built and freed without recursion; printing
  // or comparing it stops at the data depth limit.
  CHECK(render(nested_list(100000) + "done") == "done");
  CHECK(error_of(nested_list(100000) + "{{ ns.x | tojson }}") ==
        "t: line 1: tojson: lists and dicts nest deeper than 256");
  CHECK(error_of(nested_list(100000) + "{{ ns.x }}") == "t: line 1: tojson: lists and dicts nest deeper than 256");
  CHECK(error_of(nested_list(100000) + "{{ ns.x == [ns.x] }}") ==
        "t: line 1: comparison: lists and dicts nest deeper than 256");
  CHECK(render(nested_list(3) + "{{ ns.x | tojson }} {{ ns.x == [[[[]]]] }}") == "[[[[]]]] True");

  // A list inside itself is allowed, as in Python; printing it stops at the
  // depth limit, and the cycle is broken when the render ends.
  CHECK(render("{% set l = [] %}{{ l.append(l) }}{{ l | length }}{{ l[0][0][0] | length }}") == "None11");
  CHECK(error_of("{% set l = [] %}{{ l.append(l) }}{{ l }}") ==
        "t: line 1: tojson: lists and dicts nest deeper than 256");
  CHECK(error_of("{% set ns = namespace() %}{% set ns.me = [ns] %}{{ ns | tojson }}") ==
        "t: line 1: tojson: lists and dicts nest deeper than 256");
}

TEST_CASE("work and memory are budgeted: steps, each string, the output, all values") {
  CHECK(error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}") ==
        "t: line 1: the template runs more than 1000000 steps");
  CHECK(error_of("{{ range(100000) | unique | length }}") == "t: line 1: the template runs more than 1000000 steps");
  // The string-doubling loop of issue 47 (2.4 GB in 80 s before).
  CHECK(error_of("{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}{% endfor %}") ==
        "t: line 1: '+' would make a string of more than 67108864 bytes");
  CHECK(error_of("{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}") ==
        "t: line 1: '~' would make a string of more than 67108864 bytes");
  CHECK(error_of("{% set ns = namespace(l=[1]) %}{% for i in range(100) %}{% set ns.l = ns.l + ns.l %}{% endfor %}") ==
        "t: line 1: the template runs more than 1000000 steps");
  CHECK(error_of("{{ (range(10000) | join(',')) | replace(',', 'x' * 10000) }}") ==
        "t: line 1: replace would make a string of more than 67108864 bytes");
  CHECK(error_of("{{ (['x' * 1000000] * 100) | join }}") ==
        "t: line 1: join would make a string of more than 67108864 bytes");
  CHECK(error_of("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}") ==
        "t: line 1: the template writes more than 67108864 bytes");
  // Copies of a 50 MB string kept in a list: each is within the string
  // limit, together they pass the 1 GiB allowance for values.
  CHECK(error_of("{% set ns = namespace(l=[]) %}{% set s = 'x' * 50000000 %}"
                 "{% for i in range(100) %}{{ ns.l.append(s) }}{% endfor %}") ==
        "t: line 1: the template's values take more than 1073741824 bytes (made or copied while rendering)");
}

TEST_CASE("searching a long string for a long needle takes linear time") {
  // 2^24 'a's and a needle of 2^17 'a's then 'b', built by doubling: a
  // search that compares the needle at every position would take hours.
  const std::string setup =
      "{% set ns = namespace(hay='a', needle='a') %}{% for i in range(24) %}{% set ns.hay = ns.hay ~ ns.hay %}"
      "{% endfor %}{% for i in range(17) %}{% set ns.needle = ns.needle ~ ns.needle %}{% endfor %}"
      "{% set hay = ns.hay %}{% set needle = ns.needle ~ 'b' %}";
  CHECK(render(setup + "{{ hay | length }} {{ needle in hay }} {{ hay.find(needle) }} {{ hay.count(needle) }} "
                       "{{ hay.split(needle) | length }} {{ hay | replace(needle, 'x') | length }}") ==
        "16777216 False -1 0 1 16777216");
  CHECK(render(setup + "{{ hay.strip(needle) | length }}") == "0");  // every byte of hay is in the set
}
