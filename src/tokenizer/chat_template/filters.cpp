// The filters, tests and methods of strings, lists and dicts a chat
// template calls, with Python's semantics.
#include "tokenizer/chat_template/render.hpp"

#include "base/utf8.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <sstream>

namespace sao::tokenizer::jinja {

namespace {

// std::string::find compares the needle at every position: a 1 MiB needle
// in a 64 MiB string would take hours. glibc's memmem uses the two-way
// algorithm for long needles, linear in the text whatever the needle holds.
size_t find_in(const std::string& text, const std::string& needle, size_t from = 0) {
  if (needle.size() <= 64 || from >= text.size()) return text.find(needle, from);
  const void* found = ::memmem(text.data() + from, text.size() - from, needle.data(), needle.size());
  return found == nullptr ? std::string::npos : static_cast<size_t>(static_cast<const char*>(found) - text.data());
}

// Python's float(text): the whole text (spaces around allowed) or nothing.
std::optional<double> parse_float(const std::string& text) {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(begin, &end);
  if (end == begin) return std::nullopt;
  while (*end != '\0' && std::isspace(static_cast<unsigned char>(*end))) ++end;
  if (*end != '\0') return std::nullopt;
  return value;
}

}  // namespace

// Python's str.strip: with `chars`, exactly those characters; without,
// every character str.isspace() accepts (ASCII and Unicode spaces).
std::string Renderer::strip_chars(const std::string& text, const Value* chars, bool left, bool right) {
  if (chars != nullptr && chars->is(Value::Kind::kString)) {
    std::array<bool, 256> in_set{};  // a table, not a search of `chars` per byte
    for (const char c : chars->text) in_set[static_cast<unsigned char>(c)] = true;
    size_t begin = 0, end = text.size();
    if (left)
      while (begin < end && in_set[static_cast<unsigned char>(text[begin])]) ++begin;
    if (right)
      while (end > begin && in_set[static_cast<unsigned char>(text[end - 1])]) --end;
    return text.substr(begin, end - begin);
  }
  static const std::vector<std::string> kUnicodeSpaces = {
      "\xC2\x85",     "\xC2\xA0",     "\xE1\x9A\x80", "\xE2\x80\x80", "\xE2\x80\x81", "\xE2\x80\x82", "\xE2\x80\x83",
      "\xE2\x80\x84", "\xE2\x80\x85", "\xE2\x80\x86", "\xE2\x80\x87", "\xE2\x80\x88", "\xE2\x80\x89", "\xE2\x80\x8A",
      "\xE2\x80\xA8", "\xE2\x80\xA9", "\xE2\x80\xAF", "\xE2\x81\x9F", "\xE3\x80\x80"};
  auto space_at = [&](size_t at, bool backwards) -> size_t {
    const auto c = static_cast<unsigned char>(backwards ? text[at - 1] : text[at]);
    if ((c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20)) return 1;
    for (const auto& space : kUnicodeSpaces) {
      if (backwards ? at >= space.size() && text.compare(at - space.size(), space.size(), space) == 0
                    : text.compare(at, space.size(), space) == 0)
        return space.size();
    }
    return 0;
  };
  size_t begin = 0, end = text.size();
  if (left)
    while (begin < end) {
      const auto width = space_at(begin, false);
      if (width == 0) break;
      begin += width;
    }
  if (right)
    while (end > begin) {
      const auto width = space_at(end, true);
      if (width == 0) break;
      end -= width;
    }
  return text.substr(begin, end - begin);
}

Value Renderer::call_method(const Value& function, const std::vector<Value>& args) {
  const Value& self = *function.self;
  const std::string& name = function.text;
  auto arg_string = [&](size_t i) -> const std::string& {
    if (i >= args.size() || !args[i].is(Value::Kind::kString))
      fail(name + ": argument " + std::to_string(i + 1) + " must be a string");
    return args[i].text;
  };
  if (name == "str.startswith" || name == "str.endswith") {
    std::vector<std::string> options;
    if (!args.empty() && args[0].is(Value::Kind::kArray)) {
      for (const auto& option : *args[0].array) options.push_back(to_text(option));
    } else {
      options.push_back(arg_string(0));
    }
    for (const auto& option : options) {
      if (option.size() > self.text.size()) continue;
      if (name == "str.startswith" ? self.text.compare(0, option.size(), option) == 0
                                   : self.text.compare(self.text.size() - option.size(), option.size(), option) == 0)
        return Value::of(true);
    }
    return Value::of(false);
  }
  if (name == "str.strip") return Value::of(strip_chars(self.text, args.empty() ? nullptr : &args[0], true, true));
  if (name == "str.lstrip") return Value::of(strip_chars(self.text, args.empty() ? nullptr : &args[0], true, false));
  if (name == "str.rstrip") return Value::of(strip_chars(self.text, args.empty() ? nullptr : &args[0], false, true));
  if (name == "str.upper" || name == "str.lower") {
    std::string text = self.text;
    for (auto& c : text)
      c = static_cast<char>(name == "str.upper" ? std::toupper(static_cast<unsigned char>(c))
                                                : std::tolower(static_cast<unsigned char>(c)));
    return Value::of(text);
  }
  if (name == "str.title" || name == "str.capitalize") return apply_filter(name.substr(4), self, {}, {});
  if (name == "str.split") {
    Array parts;
    if (args.empty() || args[0].is(Value::Kind::kNone)) {
      std::istringstream in(self.text);
      for (std::string word; in >> word;) parts.push_back(Value::of(word));
      return Value::of(std::move(parts));
    }
    const auto& separator = arg_string(0);
    if (separator.empty()) fail("split: empty separator");
    int64_t max_split = args.size() > 1 ? as_index(args[1], "split's maxsplit") : -1;
    size_t begin = 0;
    for (size_t found; (found = find_in(self.text, separator, begin)) != std::string::npos && max_split != 0;
         --max_split) {
      parts.push_back(Value::of(self.text.substr(begin, found - begin)));
      begin = found + separator.size();
    }
    parts.push_back(Value::of(self.text.substr(begin)));
    return Value::of(std::move(parts));
  }
  if (name == "str.splitlines") {
    Array parts;
    std::istringstream in(self.text);
    for (std::string line; std::getline(in, line);) parts.push_back(Value::of(line));
    return Value::of(std::move(parts));
  }
  if (name == "str.replace") return apply_filter("replace", self, args, {});
  if (name == "str.find") {
    const auto found = find_in(self.text, arg_string(0));
    return Value::of(found == std::string::npos ? int64_t{-1} : static_cast<int64_t>(found));
  }
  if (name == "str.count") {
    const auto& needle = arg_string(0);
    int64_t count = 0;
    if (!needle.empty())
      for (size_t at = find_in(self.text, needle); at != std::string::npos;
           at = find_in(self.text, needle, at + needle.size()))
        ++count;
    return Value::of(count);
  }
  if (name == "str.join") {
    if (args.empty()) fail("join needs a list");
    return Value::of(join_text(iterate(args[0]), self.text));
  }
  if (name == "dict.items" || name == "dict.keys" || name == "dict.values") {
    Array items;
    for (const auto& [key, item] : *self.object) {
      if (name == "dict.items") items.push_back(Value::of(Array{Value::of(key), item}));
      if (name == "dict.keys") items.push_back(Value::of(key));
      if (name == "dict.values") items.push_back(item);
    }
    return Value::of(std::move(items));
  }
  if (name == "dict.get") {
    if (args.empty() || !args[0].is(Value::Kind::kString)) fail("get: the key must be a string");
    if (const auto* found = self.find(args[0].text)) return *found;
    return args.size() > 1 ? args[1] : Value::none();
  }
  if (name == "list.append") {
    if (args.size() != 1) fail("append takes one argument");
    self.array->push_back(args[0]);
    return Value::none();
  }
  if (name == "list.count" || name == "list.index") {
    if (args.size() != 1) fail(name + " takes one argument");
    int64_t count = 0;
    for (size_t i = 0; i < self.array->size(); ++i) {
      if (!equal((*self.array)[i], args[0])) continue;
      if (name == "list.index") return Value::of(static_cast<int64_t>(i));
      ++count;
    }
    if (name == "list.index") fail("index: the value is not in the list");
    return Value::of(count);
  }
  fail("method '" + name + "' is not supported");
}

Value Renderer::apply_filter(const std::string& name, const Value& value, const std::vector<Value>& args,
                             const std::vector<std::pair<std::string, Value>>& keywords) {
  auto keyword = [&](const char* key) -> const Value* {
    for (const auto& [k, v] : keywords)
      if (k == key) return &v;
    return nullptr;
  };
  if (name == "trim") {
    if (!value.is(Value::Kind::kString)) return Value::of(strip_chars(to_text(value), nullptr, true, true));
    return Value::of(strip_chars(value.text, args.empty() ? nullptr : &args[0], true, true));
  }
  if (name == "tojson") {
    const Value* indent = keyword("indent");
    if (indent == nullptr && !args.empty()) indent = &args[0];
    const int64_t width = indent != nullptr && indent->is(Value::Kind::kInt) ? indent->integer : 0;
    if (width > kMaxIndent)
      fail("tojson: indent " + std::to_string(width) + " is over the limit of " + std::to_string(kMaxIndent));
    return Value::of(to_json_text(value, width, 0));
  }
  if (name == "length" || name == "count") {
    if (value.is(Value::Kind::kString)) {
      int64_t characters = 0;
      for (const char c : value.text) characters += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
      return Value::of(characters);
    }
    if (value.is(Value::Kind::kArray)) return Value::of(static_cast<int64_t>(value.array->size()));
    if (value.is(Value::Kind::kObject)) return Value::of(static_cast<int64_t>(value.object->size()));
    fail(std::string("length of a ") + kind_name(value));
  }
  if (name == "string") return Value::of(to_text(value));
  if (name == "upper" || name == "lower")
    return call_method(Value::function("str." + name, std::make_shared<Value>(Value::of(to_text(value)))), {});
  if (name == "capitalize" || name == "title") {
    std::string text = to_text(value);
    bool start = true;
    for (auto& c : text) {
      const auto u = static_cast<unsigned char>(c);
      if (name == "capitalize") {
        c = static_cast<char>(start ? std::toupper(u) : std::tolower(u));
        start = false;
      } else {
        c = static_cast<char>(start ? std::toupper(u) : std::tolower(u));
        start = !std::isalnum(u);
      }
    }
    return Value::of(text);
  }
  if (name == "first" || name == "last") {
    const auto items = iterate(value);
    if (items.empty()) return Value();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    return Value::of(join_text(iterate(value), args.empty() ? "" : to_text(args[0])));
  }
  if (name == "reverse") {
    if (value.is(Value::Kind::kString)) return Value::of(std::string(value.text.rbegin(), value.text.rend()));
    auto items = iterate(value);
    std::reverse(items.begin(), items.end());
    return Value::of(std::move(items));
  }
  if (name == "list") return Value::of(iterate(value));
  if (name == "unique") {
    Array items;
    for (const auto& item : iterate(value))
      if (std::none_of(items.begin(), items.end(), [&](const Value& seen) { return equal(seen, item); }))
        items.push_back(item);
    return Value::of(std::move(items));
  }
  if (name == "default" || name == "d") {
    const bool boolean = args.size() > 1 && truthy(args[1]);
    if (value.is(Value::Kind::kUndefined) || (boolean && !truthy(value)))
      return args.empty() ? Value::of(std::string()) : args[0];
    return value;
  }
  if (name == "replace") {
    if (args.size() < 2) fail("replace needs two arguments");
    std::string text = to_text(value);
    const std::string from = to_text(args[0]), to = to_text(args[1]);
    if (from.empty()) fail("replace: empty pattern");
    std::string out;
    size_t begin = 0;
    for (size_t found; (found = find_in(text, from, begin)) != std::string::npos; begin = found + from.size()) {
      check_text_size(uint64_t{out.size()} + (found - begin) + to.size(), "replace");
      out.append(text, begin, found - begin).append(to);
    }
    check_text_size(uint64_t{out.size()} + (text.size() - begin), "replace");
    return Value::of(out.append(text, begin, std::string::npos));
  }
  if (name == "items") return call_method(Value::function("dict.items", std::make_shared<Value>(value)), {});
  if (name == "int") {
    return to_int(value);
  }
  if (name == "float") {
    if (value.numeric()) return Value::of_float(value.as_double());
    const auto parsed = value.is(Value::Kind::kString) ? parse_float(value.text) : std::nullopt;
    return Value::of_float(parsed ? *parsed : 0.0);  // jinja2: 0.0 for what float() refuses
  }
  if (name == "abs") {
    if (value.is(Value::Kind::kInt)) {
      if (value.integer == std::numeric_limits<int64_t>::min())
        fail("integer overflow in abs: abs(" + std::to_string(value.integer) + ") does not fit in 64 bits");
      return Value::of(value.integer < 0 ? -value.integer : value.integer);
    }
    return Value::of_float(std::fabs(value.as_double()));
  }
  if (name == "safe" || name == "e" || name == "escape") return value;  // chat templates render unescaped
  if (name == "indent") {
    const int64_t width = args.empty() ? 4 : as_index(args[0], "indent's width");
    if (width > kMaxIndent)
      fail("indent: width " + std::to_string(width) + " is over the limit of " + std::to_string(kMaxIndent));
    const std::string pad(static_cast<size_t>(std::max<int64_t>(0, width)), ' ');
    std::string text = to_text(value), out;
    const auto lines = static_cast<uint64_t>(std::count(text.begin(), text.end(), '\n'));
    check_text_size(uint64_t{text.size()} + lines * pad.size(), "indent");
    for (size_t i = 0; i < text.size(); ++i) {
      out += text[i];
      if (text[i] == '\n' && i + 1 < text.size() && text[i + 1] != '\n') out += pad;
    }
    return Value::of(out);
  }
  if (name == "wordcount") {
    std::istringstream in(to_text(value));
    int64_t words = 0;
    for (std::string word; in >> word;) ++words;
    return Value::of(words);
  }
  fail("filter '" + name + "' is not supported with these arguments");
}

bool Renderer::apply_test(const std::string& name, const Value& value, const std::vector<Value>& args) {
  if (name == "defined") return !value.is(Value::Kind::kUndefined);
  if (name == "undefined") return value.is(Value::Kind::kUndefined);
  if (name == "none") return value.is(Value::Kind::kNone);
  if (name == "string") return value.is(Value::Kind::kString);
  if (name == "number") return value.numeric();
  if (name == "integer") return value.is(Value::Kind::kInt);
  if (name == "float") return value.is(Value::Kind::kFloat);
  if (name == "boolean") return value.is(Value::Kind::kBool);
  if (name == "true") return value.is(Value::Kind::kBool) && value.boolean;
  if (name == "false") return value.is(Value::Kind::kBool) && !value.boolean;
  if (name == "mapping") return value.is(Value::Kind::kObject);
  if (name == "iterable")
    return value.is(Value::Kind::kArray) || value.is(Value::Kind::kObject) || value.is(Value::Kind::kString);
  if (name == "sequence")
    return value.is(Value::Kind::kArray) || value.is(Value::Kind::kString) || value.is(Value::Kind::kObject);
  if (name == "callable") return value.is(Value::Kind::kFunction);
  if (name == "odd" || name == "even") return (as_index(value, "odd/even") % 2 != 0) == (name == "odd");
  if (name == "lower" || name == "upper") {
    const auto text = to_text(value);
    return std::all_of(text.begin(), text.end(), [&](char c) {
      return name == "lower" ? !std::isupper(static_cast<unsigned char>(c))
                             : !std::islower(static_cast<unsigned char>(c));
    });
  }
  if (args.empty()) fail("test '" + name + "' needs an argument");
  if (name == "equalto" || name == "eq") return equal(value, args[0]);
  if (name == "ne") return !equal(value, args[0]);
  if (name == "in") return contains(args[0], value);
  fail("test '" + name + "' is not supported");
}

bool Renderer::contains(const Value& container, const Value& item) {
  if (container.is(Value::Kind::kString)) {
    if (!item.is(Value::Kind::kString)) fail("'in <string>' needs a string on the left");
    return find_in(container.text, item.text) != std::string::npos;
  }
  if (container.is(Value::Kind::kArray))
    return std::any_of(container.array->begin(), container.array->end(),
                       [&](const Value& v) { return equal(v, item); });
  if (container.is(Value::Kind::kObject)) return item.is(Value::Kind::kString) && container.find(item.text) != nullptr;
  if (container.is(Value::Kind::kUndefined)) return false;
  fail(std::string("'in' a ") + kind_name(container));
}

// jinja2's int filter: int(value), else int(float(value)), else 0; a value
// Python would hold as a big integer is an error here, not a wrong number.
Value Renderer::to_int(const Value& value) {
  if (value.is(Value::Kind::kInt)) return value;
  if (value.is(Value::Kind::kBool)) return Value::of(int64_t{value.boolean ? 1 : 0});
  double number = 0;
  if (value.is(Value::Kind::kFloat)) {
    number = value.number;
  } else if (value.is(Value::Kind::kString)) {
    const char* begin = value.text.c_str();
    char* end = nullptr;
    errno = 0;
    const long long integer = std::strtoll(begin, &end, 10);
    bool whole = end != begin;
    while (whole && *end != '\0' && std::isspace(static_cast<unsigned char>(*end))) ++end;
    if (whole && *end == '\0') {
      if (errno == ERANGE) fail("int: " + base::quoted_excerpt(value.text) + " does not fit in 64 bits");
      return Value::of(static_cast<int64_t>(integer));
    }
    const auto parsed = parse_float(value.text);
    if (!parsed) return Value::of(int64_t{0});
    number = *parsed;
  } else {
    return Value::of(int64_t{0});
  }
  if (std::isnan(number)) return Value::of(int64_t{0});  // int(nan) is a ValueError: jinja2's default
  // 2^63 is exactly representable; every double below it truncates into range.
  if (!(number >= -9223372036854775808.0 && number < 9223372036854775808.0))
    fail("int: " + float_text(number) + " does not fit in 64 bits");
  return Value::of(static_cast<int64_t>(number));
}

std::string Renderer::join_text(const std::vector<Value>& items, const std::string& separator) {
  std::string text;
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string item = to_text(items[i]);
    check_text_size(uint64_t{text.size()} + (i ? separator.size() : 0) + item.size(), "join");
    if (i) text += separator;
    text += item;
  }
  return text;
}

}  // namespace sao::tokenizer::jinja
