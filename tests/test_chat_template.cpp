// ChatTemplate on small templates with exactly known output: Python
// jinja2's semantics (what transformers renders with trim_blocks and
// lstrip_blocks), its scoping, and an error naming the line for every
// construct sao does not render. The real templates are checked against
// Hugging Face's renderer in test_parity_chat_template.
#include "tokenizer/chat_template/chat_template.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace {

using sao::tokenizer::ChatTemplate;
using Json = nlohmann::ordered_json;

std::string render(const std::string& source, const Json& variables = Json::object()) {
  return ChatTemplate::parse(source, "t").render(variables);
}

std::string error_of(const std::string& source, const Json& variables = Json::object()) {
  try {
    render(source, variables);
  } catch (const std::exception& error) {
    return error.what();
  }
  return "no error";
}

const Json kConversation = {{"messages",
                             {{{"role", "system"}, {"content", "Be brief."}},
                              {{"role", "user"}, {"content", " Hi "}},
                              {{"role", "assistant"}, {"content", "Hello!"}}}}};

}  // namespace

TEST_CASE("a chat-style template renders turns, trim and the generation prompt") {
  const std::string source =
      "{% for m in messages %}\n"
      "  {%- if m.role == 'system' %}[S]{{ m.content }}\n"
      "  {%- else %}<{{ m['role'] }}>{{ m.content | trim }}</>\n"
      "  {%- endif %}\n"
      "{% endfor %}\n"
      "{% if add_generation_prompt %}<assistant>{% endif %}\n";
  auto variables = kConversation;
  variables["add_generation_prompt"] = true;
  CHECK(render(source, variables) == "[S]Be brief.<user>Hi</><assistant>Hello!</><assistant>");
  variables["add_generation_prompt"] = false;
  CHECK(render(source, variables) == "[S]Be brief.<user>Hi</><assistant>Hello!</>");
}

TEST_CASE("trim_blocks, lstrip_blocks and -/- whitespace control act as in transformers") {
  CHECK(render("a\n  {% if true %}\nb\n  {% endif %}\nc") == "a\nb\nc");
  CHECK(render("a   {{- 'b' -}}   c") == "abc");
  CHECK(render("x {# a comment #}y") == "x y");
  CHECK(render("one trailing newline is dropped\n") == "one trailing newline is dropped");
}

TEST_CASE("strings follow Python: strip(chars), split, slicing, startswith") {
  CHECK(render("{{ ' \\nx\\n'.lstrip('\\n') }}|") == " \nx\n|");  // only newlines, not the space
  CHECK(render("{{ '\\n\\nx \\n'.strip('\\n') }}|") == "x |");
  CHECK(render("{{ '\\u3000 x\\t'.strip() }}|{{ '\\u3000'|length }}|{{ '\\x41' }}") == "x|1|A");
  CHECK(render("{{ 'a</think>b</think>c'.split('</think>')[-1] }}") == "c");
  CHECK(render("{{ 'abcdef'[1:4] }}{{ 'abc'[::-1] }}{{ [1,2,3][-1] }}") == "bcdcba3");
  CHECK(render("{{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('x', 'lo')) }}") == "True True");
  CHECK(render("{{ 'x' ~ 1 ~ none }}") == "x1None");
}

TEST_CASE("loops: loop variables, reversed slices, and a set inside a loop stays inside") {
  CHECK(render("{% for x in [10, 20, 30] %}{{ loop.index0 }}{{ loop.first }}{{ loop.last }},{% endfor %}") ==
        "0TrueFalse,1FalseFalse,2FalseTrue,");
  CHECK(render("{% set n = 1 %}{% for x in [1, 2] %}{% set n = n + x %}{% endfor %}{{ n }}") == "1");
  CHECK(render("{% set ns = namespace(n=1) %}{% for x in [1, 2] %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}") ==
        "4");
  CHECK(render("{% for m in messages[::-1] %}{{ m.role[0] }}{% endfor %}", kConversation) == "aus");
  CHECK(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}") == "a=1;b=2;");
  CHECK(render("{% for x in [] %}x{% else %}empty{% endfor %}") == "empty");
  CHECK(render("{% for x in [1, 2, 3] if x != 2 %}{{ x }}{% endfor %}") == "13");
}

TEST_CASE("tests, filters and tojson as transformers defines them") {
  CHECK(render("{{ x is defined }} {{ none is none }} {{ 'a' is string }} {{ 3 is not string }}") ==
        "False True True True");
  CHECK(render("{{ [1, 'a', none, true, {'k': [1.5]}] | tojson }}") == "[1, \"a\", null, true, {\"k\": [1.5]}]");
  CHECK(render("{{ {'a': 1} | tojson(indent=2) }}") == "{\n  \"a\": 1\n}");
  CHECK(render("{{ 'é\"' | tojson }}") == "\"é\\\"\"");
  CHECK(render("{{ messages | length - 1 }}", kConversation) == "2");
  CHECK(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }}") == "3 -4 2 3.5");
  CHECK(render("{{ 10.0 }} {{ 2.5 }} {{ 10.0 ** 16 }} {{ 10.0 ** 15 }} {{ 0.0001 }} {{ 0.00001 }} {{ -0.0 }}") ==
        "10.0 2.5 1e+16 1000000000000000.0 0.0001 1e-05 -0.0");
  CHECK(render("{{ 'a' if false }}|{{ 'b' if false else 'c' }}") == "|c");
}

TEST_CASE("unsupported constructs and runtime errors name the line") {
  CHECK(error_of("x\n{% macro m() %}{% endmacro %}") == "t: line 2: statement 'macro' is not supported");
  CHECK(error_of("{{ x | wordwrap }}") == "t: line 1: filter 'wordwrap' is not supported");
  CHECK(error_of("{% if x is divisibleby(3) %}{% endif %}") == "t: line 1: test 'divisibleby' is not supported");
  CHECK(error_of("{% if true %}x") == "t: line 1: 'if' is never closed with 'endif'");
  CHECK(error_of("{{ x ") == "t: line 1: '{{' is never closed");
  CHECK(error_of("a\nb\n{{ raise_exception('roles must alternate') }}") ==
        "t: line 3: the template raised an exception: roles must alternate");
  CHECK(error_of("{{ strftime_now('%Y') }}") == "t: line 1: a undefined is not callable");
  CHECK(error_of("{{ 1 + 'a' }}") == "t: line 1: unsupported operand types for +: integer and string");
}

TEST_CASE("load_chat_template reads tokenizer_config.json, a named list, or chat_template.jinja") {
  namespace fs = std::filesystem;
  const auto dir = fs::temp_directory_path() / ("sao_test_chat_template_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  CHECK_FALSE(sao::tokenizer::load_chat_template(dir.string()).has_value());
  std::ofstream(dir / "tokenizer_config.json") << R"({"chat_template": null})";
  CHECK_FALSE(sao::tokenizer::load_chat_template(dir.string()).has_value());
  std::ofstream(dir / "tokenizer_config.json") << R"({"chat_template": "A{{ messages | length }}"})";
  CHECK(sao::tokenizer::load_chat_template(dir.string())->render(kConversation) == "A3");
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})";
  CHECK(sao::tokenizer::load_chat_template(dir.string())->render(kConversation) == "D");
  std::ofstream(dir / "tokenizer_config.json") << R"({"chat_template": [{"name": "tool_use", "template": "T"}]})";
  CHECK_THROWS_WITH(sao::tokenizer::load_chat_template(dir.string()),
                    doctest::Contains("a list of named templates without one named \"default\""));
  std::ofstream(dir / "chat_template.jinja") << "J{{ messages[0].role }}";
  CHECK(sao::tokenizer::load_chat_template(dir.string())->render(kConversation) == "Jsystem");
  // A FIFO in a template's place is refused by name, not read (which would block).
  fs::remove(dir / "chat_template.jinja");
  REQUIRE(::mkfifo((dir / "chat_template.jinja").c_str(), 0600) == 0);
  CHECK_THROWS_WITH(sao::tokenizer::load_chat_template(dir.string()),
                    ((dir / "chat_template.jinja").string() + ": not a regular file").c_str());
  fs::remove_all(dir);
}
