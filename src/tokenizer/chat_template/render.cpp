#include "tokenizer/chat_template/render.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace sao::tokenizer::jinja {

namespace {

std::string json_string(const std::string& text) {
  return OrderedJson(text).dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
}

// How many of start, start + step, ... come before stop (the length of
// Python's range), computed without overflow for any 64-bit bounds.
uint64_t range_length(int64_t start, int64_t stop, int64_t step) {
  const auto ustart = static_cast<uint64_t>(start), ustop = static_cast<uint64_t>(stop);
  if (step > 0) return start < stop ? (ustop - ustart - 1) / static_cast<uint64_t>(step) + 1 : 0;
  return start > stop ? (ustart - ustop - 1) / (uint64_t{0} - static_cast<uint64_t>(step)) + 1 : 0;
}

}  // namespace

std::string Renderer::render(const Body& body) {
  std::string out;
  run(body, out);
  return out;
}

void Renderer::spend_steps(uint64_t count) {
  steps_ += count;
  if (steps_ > kMaxSteps) fail("the template runs more than " + std::to_string(kMaxSteps) + " steps");
}

void Renderer::check_text_size(uint64_t bytes, const std::string& what) const {
  if (bytes > kMaxTextBytes)
    fail(what + " would make a string of more than " + std::to_string(kMaxTextBytes) + " bytes");
}

void Renderer::check_data_depth(int depth, const char* what) const {
  if (depth > kMaxDataDepth)
    fail(std::string(what) + ": lists and dicts nest deeper than " + std::to_string(kMaxDataDepth));
}

void Renderer::overflow(const std::string& op, int64_t x, int64_t y) const {
  fail("integer overflow in '" + op + "': " + std::to_string(x) + " " + op + " " + std::to_string(y) +
       " does not fit in 64 bits");
}

Flow Renderer::run(const Body& body, std::string& out) {
  const auto write = [&](const std::string& text) {
    if (out.size() + text.size() > kMaxOutputBytes)
      fail("the template writes more than " + std::to_string(kMaxOutputBytes) + " bytes");
    out += text;
  };
  for (const auto& node : body) {
    line_ = node->line;
    // A template is data from a model directory: bounded work and output,
    // so nested range() loops end in an error, not a hang.
    spend_steps(1);
    switch (node->type) {
      case Node::Type::kText:
        write(node->text);
        break;
      case Node::Type::kOutput:
        write(to_text(eval(*node->expr)));
        break;
      case Node::Type::kIf:
        for (const auto& [condition, branch] : node->branches) {
          if (condition == nullptr || truthy(eval(*condition))) {
            const auto flow = run(branch, out);
            if (flow != Flow::kNormal) return flow;
            break;
          }
        }
        break;
      case Node::Type::kFor:
        run_for(*node, out);
        break;
      case Node::Type::kSet:
        assign(*node);
        break;
      case Node::Type::kBreak:
        return Flow::kBreak;
      case Node::Type::kContinue:
        return Flow::kContinue;
    }
  }
  return Flow::kNormal;
}

Value Renderer::lookup(const std::string& name) const {
  for (auto scope = scopes_.rbegin(); scope != scopes_.rend(); ++scope) {
    const auto it = scope->find(name);
    if (it != scope->end()) return it->second;
  }
  const auto& functions = known_functions();
  if (std::find(functions.begin(), functions.end(), name) != functions.end()) return Value::function(name);
  return Value();
}

void Renderer::assign(const Node& node) {
  auto value = eval(*node.expr);
  if (node.targets.size() == 1) {
    scopes_.back()[node.targets[0]] = std::move(value);
    return;
  }
  auto target = lookup(node.targets[0]);
  if (!target.is(Value::Kind::kObject) || !target.is_namespace)
    fail("cannot set attribute '" + node.targets[1] + "' of '" + node.targets[0] + "', which is not a namespace");
  for (auto& [key, item] : *target.object) {
    if (key == node.targets[1]) {
      item = std::move(value);
      return;
    }
  }
  target.object->emplace_back(node.targets[1], std::move(value));
}

std::vector<Value> Renderer::iterate(const Value& value) {
  if (value.is(Value::Kind::kArray)) {
    spend_steps(value.array->size());
    return *value.array;
  }
  if (value.is(Value::Kind::kObject)) {
    spend_steps(value.object->size());
    std::vector<Value> keys;
    for (const auto& [key, item] : *value.object) keys.push_back(Value::of(key));
    return keys;
  }
  if (value.is(Value::Kind::kString)) {
    std::vector<Value> characters;
    for (size_t i = 0; i < value.text.size();) {
      size_t length = 1;
      const auto lead = static_cast<unsigned char>(value.text[i]);
      if (lead >= 0xF0)
        length = 4;
      else if (lead >= 0xE0)
        length = 3;
      else if (lead >= 0xC0)
        length = 2;
      spend_steps(1);
      characters.push_back(Value::of(value.text.substr(i, length)));
      i += length;
    }
    return characters;
  }
  if (value.is(Value::Kind::kUndefined) || value.is(Value::Kind::kNone)) return {};
  fail(std::string("cannot iterate over a ") + kind_name(value));
}

void Renderer::run_for(const Node& node, std::string& out) {
  auto items = iterate(eval(*node.expr));
  if (node.filter) {
    std::vector<Value> kept;
    for (auto& item : items) {
      scopes_.emplace_back();
      bind_targets(node, item);
      if (truthy(eval(*node.filter))) kept.push_back(item);
      scopes_.pop_back();
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    run(node.else_body, out);
    return;
  }
  const auto length = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < length; ++i) {
    spend_steps(1);
    scopes_.emplace_back();  // a loop body's `set` does not leak out (Jinja scoping)
    bind_targets(node, items[static_cast<size_t>(i)]);
    Object loop = {{"index0", Value::of(i)},
                   {"index", Value::of(i + 1)},
                   {"revindex0", Value::of(length - i - 1)},
                   {"revindex", Value::of(length - i)},
                   {"first", Value::of(i == 0)},
                   {"last", Value::of(i + 1 == length)},
                   {"length", Value::of(length)},
                   {"previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value()},
                   {"nextitem", i + 1 < length ? items[static_cast<size_t>(i + 1)] : Value()}};
    scopes_.back()["loop"] = Value::of(std::move(loop));
    const auto flow = run(node.body, out);
    scopes_.pop_back();
    if (flow == Flow::kBreak) break;
  }
}

void Renderer::bind_targets(const Node& node, const Value& item) {
  if (node.targets.size() == 1) {
    scopes_.back()[node.targets[0]] = item;
    return;
  }
  if (!item.is(Value::Kind::kArray) || item.array->size() != node.targets.size())
    fail("cannot unpack a " + std::string(kind_name(item)) + " into " + std::to_string(node.targets.size()) +
         " loop variables");
  for (size_t k = 0; k < node.targets.size(); ++k) scopes_.back()[node.targets[k]] = (*item.array)[k];
}

int64_t Renderer::as_index(const Value& v, const char* what) const {
  if (!v.is(Value::Kind::kInt)) fail(std::string(what) + " must be an integer, got a " + kind_name(v));
  return v.integer;
}

Value Renderer::attribute(const Value& value, const std::string& name) {
  if (value.is(Value::Kind::kObject)) {
    if (const auto* found = value.find(name)) return *found;
    if (!value.is_namespace && (name == "items" || name == "keys" || name == "values" || name == "get"))
      return Value::function("dict." + name, std::make_shared<Value>(value));
    return Value();
  }
  if (value.is(Value::Kind::kString)) {
    static const char* const kMethods[] = {"startswith", "endswith", "split", "strip",   "lstrip",
                                           "rstrip",     "upper",    "lower", "replace", "title",
                                           "capitalize", "find",     "count", "join",    "splitlines"};
    for (const char* method : kMethods)
      if (name == method) return Value::function(std::string("str.") + method, std::make_shared<Value>(value));
    fail("strings have no method '" + name + "' here");
  }
  if (value.is(Value::Kind::kArray) && (name == "append" || name == "index" || name == "count"))
    return Value::function("list." + name, std::make_shared<Value>(value));
  if (value.is(Value::Kind::kUndefined)) return Value();
  if (value.is(Value::Kind::kNone)) fail("'None' has no attribute '" + name + "'");
  return Value();
}

Value Renderer::index(const Value& value, const Value& key) {
  if (value.is(Value::Kind::kArray) || value.is(Value::Kind::kString)) {
    if (!key.is(Value::Kind::kInt)) {
      if (value.is(Value::Kind::kArray)) return Value();
      fail("string indices must be integers");
    }
    const auto size = static_cast<int64_t>(value.is(Value::Kind::kArray) ? value.array->size() : value.text.size());
    int64_t i = key.integer < 0 ? key.integer + size : key.integer;
    if (i < 0 || i >= size) return Value();  // jinja2: undefined
    if (value.is(Value::Kind::kArray)) return (*value.array)[static_cast<size_t>(i)];
    return Value::of(value.text.substr(static_cast<size_t>(i), 1));
  }
  if (value.is(Value::Kind::kObject)) {
    if (!key.is(Value::Kind::kString)) return Value();
    return attribute(value, key.text);
  }
  if (value.is(Value::Kind::kUndefined)) return Value();
  fail(std::string("cannot index a ") + kind_name(value));
}

Value Renderer::slice(const Value& value, const Expr& e) {
  const auto size = static_cast<int64_t>(value.is(Value::Kind::kArray)    ? value.array->size()
                                         : value.is(Value::Kind::kString) ? value.text.size()
                                                                          : 0);
  if (!value.is(Value::Kind::kArray) && !value.is(Value::Kind::kString))
    fail(std::string("cannot slice a ") + kind_name(value));
  const int64_t step = e.children[3] ? as_index(eval(*e.children[3]), "a slice step") : 1;
  if (step == 0) fail("slice step cannot be zero");
  auto bound = [&](const ExprPtr& part, int64_t fallback) {
    if (!part) return fallback;
    int64_t i = as_index(eval(*part), "a slice bound");
    if (i < 0) i += size;
    if (step > 0) return std::clamp<int64_t>(i, 0, size);
    return std::clamp<int64_t>(i, -1, size - 1);
  };
  const int64_t start = bound(e.children[1], step > 0 ? 0 : size - 1);
  const int64_t stop = bound(e.children[2], step > 0 ? size : -1);
  // Counted, not `i += step` until past stop: a step near 2^63 would overflow.
  const uint64_t count = range_length(start, stop, step);
  std::string text;
  Array items;
  int64_t i = start;
  for (uint64_t k = 0; k < count; ++k) {
    if (value.is(Value::Kind::kString)) {
      text += value.text[static_cast<size_t>(i)];
    } else {
      spend_steps(1);
      items.push_back((*value.array)[static_cast<size_t>(i)]);
    }
    if (k + 1 < count) i += step;
  }
  if (value.is(Value::Kind::kString)) return Value::of(std::move(text));
  return Value::of(std::move(items));
}

Value Renderer::call(const Expr& e) {
  const auto function = eval(*e.children[0]);
  std::vector<Value> args;
  for (size_t i = 1; i < e.children.size(); ++i) args.push_back(eval(*e.children[i]));
  std::vector<std::pair<std::string, Value>> keywords;
  for (const auto& [key, value] : e.keywords) keywords.emplace_back(key, eval(*value));
  if (!function.is(Value::Kind::kFunction)) fail(std::string("a ") + kind_name(function) + " is not callable");
  if (function.self) return call_method(function, args);
  const auto& name = function.text;
  if (name == "raise_exception") {
    throw Error(where_ + ": line " + std::to_string(line_) +
                ": the template raised an exception: " + (args.empty() ? "" : to_text(args[0])));
  }
  if (name == "namespace" || name == "dict") {
    Object attributes;
    if (name == "dict" && !args.empty() && args[0].is(Value::Kind::kObject)) attributes = *args[0].object;
    for (auto& [key, value] : keywords) attributes.emplace_back(key, std::move(value));
    auto value = Value::of(std::move(attributes));
    value.is_namespace = name == "namespace";
    return value;
  }
  if (name == "range") {
    if (args.empty() || args.size() > 3) fail("range takes 1 to 3 arguments");
    int64_t start = 0, stop = 0, step = 1;
    if (args.size() == 1) {
      stop = as_index(args[0], "range's bound");
    } else {
      start = as_index(args[0], "range's start");
      stop = as_index(args[1], "range's stop");
      if (args.size() == 3) step = as_index(args[2], "range's step");
    }
    if (step == 0) fail("range step cannot be zero");
    const uint64_t count = range_length(start, stop, step);
    if (count > kMaxRange) fail("range of more than " + std::to_string(kMaxRange) + " items");
    spend_steps(count);
    Array items;
    int64_t i = start;
    for (uint64_t k = 0; k < count; ++k) {
      items.push_back(Value::of(i));
      if (k + 1 < count) i += step;
    }
    return Value::of(std::move(items));
  }
  fail("function '" + name + "' is not supported");
}

Value Renderer::arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (op == "+" && a.is(Value::Kind::kString) && b.is(Value::Kind::kString)) {
    check_text_size(uint64_t{a.text.size()} + b.text.size(), "'+'");
    return Value::of(a.text + b.text);
  }
  if (op == "+" && a.is(Value::Kind::kArray) && b.is(Value::Kind::kArray)) {
    spend_steps(uint64_t{a.array->size()} + b.array->size());
    Array items = *a.array;
    items.insert(items.end(), b.array->begin(), b.array->end());
    return Value::of(std::move(items));
  }
  const auto sequence = [](const Value& v) { return v.is(Value::Kind::kString) || v.is(Value::Kind::kArray); };
  if (op == "*" && sequence(a) && b.is(Value::Kind::kInt)) return repeat(a, b.integer);
  if (op == "*" && a.is(Value::Kind::kInt) && sequence(b)) return repeat(b, a.integer);
  if (!a.numeric() || !b.numeric())
    fail("unsupported operand types for " + op + ": " + kind_name(a) + " and " + kind_name(b));
  if (op == "**") return power(a, b);
  const bool integers = a.is(Value::Kind::kInt) && b.is(Value::Kind::kInt);
  if (op == "/") {
    if (b.as_double() == 0) fail("division by zero");
    return Value::of_float(a.as_double() / b.as_double());
  }
  if (integers) {
    const int64_t x = a.integer, y = b.integer;
    int64_t result = 0;
    if (op == "+") {
      if (__builtin_add_overflow(x, y, &result)) overflow(op, x, y);
      return Value::of(result);
    }
    if (op == "-") {
      if (__builtin_sub_overflow(x, y, &result)) overflow(op, x, y);
      return Value::of(result);
    }
    if (op == "*") {
      if (__builtin_mul_overflow(x, y, &result)) overflow(op, x, y);
      return Value::of(result);
    }
    if (y == 0) fail("division by zero");
    // x / -1 traps (SIGFPE) for the smallest x, x % -1 too; Python's
    // answers are -x (which may not fit) and 0.
    if (y == -1) {
      if (op == "%") return Value::of(int64_t{0});
      if (x == std::numeric_limits<int64_t>::min()) overflow(op, x, y);
      return Value::of(-x);
    }
    // Python floors the quotient and gives the remainder the divisor's sign.
    const int64_t remainder = x % y;
    const bool adjust = remainder != 0 && ((remainder < 0) != (y < 0));
    if (op == "//") return Value::of(x / y - (adjust ? 1 : 0));
    return Value::of(adjust ? remainder + y : remainder);
  }
  const double x = a.as_double(), y = b.as_double();
  if (op == "+") return Value::of_float(x + y);
  if (op == "-") return Value::of_float(x - y);
  if (op == "*") return Value::of_float(x * y);
  if (y == 0) fail("division by zero");
  if (op == "//") return Value::of_float(std::floor(x / y));
  return Value::of_float(x - std::floor(x / y) * y);
}

// Python's **: exact for integers (a negative exponent gives a float),
// an error where the result does not fit, as Python's OverflowError.
Value Renderer::power(const Value& a, const Value& b) {
  if (a.is(Value::Kind::kInt) && b.is(Value::Kind::kInt) && b.integer >= 0) {
    int64_t base = a.integer, result = 1;
    for (int64_t exponent = b.integer; exponent > 0; exponent >>= 1) {
      if ((exponent & 1) != 0 && __builtin_mul_overflow(result, base, &result)) overflow("**", a.integer, b.integer);
      if (exponent > 1 && __builtin_mul_overflow(base, base, &base)) overflow("**", a.integer, b.integer);
    }
    return Value::of(result);
  }
  const double x = a.as_double(), y = b.as_double();
  if (x == 0 && y < 0) fail("division by zero (0 to a negative power)");
  const double result = std::pow(x, y);
  if (std::isinf(result) && std::isfinite(x) && std::isfinite(y))
    fail("float overflow in '**': " + float_text(x) + " ** " + float_text(y));
  if (std::isnan(result) && !std::isnan(x) && !std::isnan(y))
    fail("'**': " + float_text(x) + " ** " + float_text(y) + " is not a real number");
  return Value::of_float(result);
}

// Python's sequence * n: n copies (none for n <= 0), bounded before any is made.
Value Renderer::repeat(const Value& value, int64_t count) {
  const uint64_t copies = count > 0 ? static_cast<uint64_t>(count) : 0;
  if (value.is(Value::Kind::kString)) {
    const uint64_t size = value.text.size();
    check_text_size(size > 0 && copies > kMaxTextBytes / size ? uint64_t{kMaxTextBytes} + 1 : size * copies, "'*'");
    std::string text;
    text.reserve(static_cast<size_t>(size * copies));
    for (uint64_t i = 0; i < copies; ++i) text += value.text;
    return Value::of(std::move(text));
  }
  const uint64_t size = value.array->size();
  if (size > 0 && copies > kMaxSteps / size + 1) spend_steps(kMaxSteps + 1);
  spend_steps(size * copies);
  Array items;
  for (uint64_t i = 0; i < copies; ++i) items.insert(items.end(), value.array->begin(), value.array->end());
  return Value::of(std::move(items));
}

std::string Renderer::to_json_text(const Value& v, int64_t indent, int depth) {
  check_data_depth(depth, "tojson");
  const std::string item_separator = indent > 0 ? "," : ", ";
  const auto padding = [&](int level) {
    return indent > 0 ? "\n" + std::string(static_cast<size_t>(indent * level), ' ') : std::string();
  };
  switch (v.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return "null";
    case Value::Kind::kBool:
      return v.boolean ? "true" : "false";
    case Value::Kind::kInt:
      return std::to_string(v.integer);
    case Value::Kind::kFloat:
      return OrderedJson(v.number).dump();
    case Value::Kind::kString:
      return json_string(v.text);
    case Value::Kind::kArray:
    case Value::Kind::kObject: {
      const bool list = v.is(Value::Kind::kArray);
      const size_t size = list ? v.array->size() : v.object->size();
      if (size == 0) return list ? "[]" : "{}";
      spend_steps(size);
      const std::string child_pad = padding(depth + 1);
      std::string out = list ? "[" : "{";
      for (size_t i = 0; i < size; ++i) {
        std::string item =
            list ? to_json_text((*v.array)[i], indent, depth + 1)
                 : json_string((*v.object)[i].first) + ": " + to_json_text((*v.object)[i].second, indent, depth + 1);
        check_text_size(uint64_t{out.size()} + child_pad.size() + item.size() + 2, "tojson");
        out += (i ? item_separator : "") + child_pad + item;
      }
      return out + padding(depth) + (list ? "]" : "}");
    }
    case Value::Kind::kFunction:
      fail("tojson: a function cannot be serialised");
  }
  return "null";
}

std::string Renderer::to_text(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.boolean ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(v.integer);
    case Value::Kind::kFloat:
      return float_text(v.number);
    case Value::Kind::kString:
      return v.text;
    case Value::Kind::kArray:
    case Value::Kind::kObject:
      return to_json_text(v, 0, 0);
    case Value::Kind::kFunction:
      return "<function " + v.text + ">";
  }
  return "";
}

bool Renderer::equal(const Value& a, const Value& b, int depth) {
  spend_steps(1);
  check_data_depth(depth, "comparison");
  if (a.is(Value::Kind::kInt) && b.is(Value::Kind::kInt)) return a.integer == b.integer;
  if (a.numeric() && b.numeric()) return a.as_double() == b.as_double();
  if (a.is(Value::Kind::kBool) && b.is(Value::Kind::kBool)) return a.boolean == b.boolean;
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.text == b.text;
    case Value::Kind::kArray:
      if (a.array == b.array) return true;  // Python compares a list with itself by identity
      if (a.array->size() != b.array->size()) return false;
      for (size_t i = 0; i < a.array->size(); ++i)
        if (!equal((*a.array)[i], (*b.array)[i], depth + 1)) return false;
      return true;
    case Value::Kind::kObject:
      if (a.object == b.object) return true;
      if (a.object->size() != b.object->size()) return false;
      for (const auto& [key, item] : *a.object) {
        const auto* other = b.find(key);
        if (other == nullptr || !equal(item, *other, depth + 1)) return false;
      }
      return true;
    default:
      return a.object == b.object && a.text == b.text;
  }
}

bool Renderer::less(const Value& a, const Value& b) {
  if (a.numeric() && b.numeric()) return a.as_double() < b.as_double();
  if (a.is(Value::Kind::kString) && b.is(Value::Kind::kString)) return a.text < b.text;
  fail(std::string("cannot order a ") + kind_name(a) + " and a " + kind_name(b));
}

Value Renderer::eval(const Expr& e) {
  line_ = e.line;
  switch (e.type) {
    case Expr::Type::kLiteral:
      return e.literal;
    case Expr::Type::kName:
      return lookup(e.name);
    case Expr::Type::kList: {
      Array items;
      for (const auto& child : e.children) items.push_back(eval(*child));
      return Value::of(std::move(items));
    }
    case Expr::Type::kDict: {
      Object entries;
      for (const auto& [key, child] : e.keywords) entries.emplace_back(key, eval(*child));
      return Value::of(std::move(entries));
    }
    case Expr::Type::kAttribute:
      return attribute(eval(*e.children[0]), e.name);
    case Expr::Type::kIndex:
      return index(eval(*e.children[0]), eval(*e.children[1]));
    case Expr::Type::kSlice:
      return slice(eval(*e.children[0]), e);
    case Expr::Type::kCall:
      return call(e);
    case Expr::Type::kFilter: {
      const auto value = eval(*e.children[0]);
      std::vector<Value> args;
      for (size_t i = 1; i < e.children.size(); ++i) args.push_back(eval(*e.children[i]));
      std::vector<std::pair<std::string, Value>> keywords;
      for (const auto& [key, child] : e.keywords) keywords.emplace_back(key, eval(*child));
      line_ = e.line;
      return apply_filter(e.name, value, args, keywords);
    }
    case Expr::Type::kTest: {
      const auto value = eval(*e.children[0]);
      std::vector<Value> args;
      for (size_t i = 1; i < e.children.size(); ++i) args.push_back(eval(*e.children[i]));
      line_ = e.line;
      return Value::of(apply_test(e.name, value, args) != e.negated);
    }
    case Expr::Type::kUnary: {
      const auto value = eval(*e.children[0]);
      if (e.name == "not") return Value::of(!truthy(value));
      if (!value.numeric()) fail("unary " + e.name + " of a " + kind_name(value));
      if (e.name == "+") return value;
      if (value.is(Value::Kind::kFloat)) return Value::of_float(-value.number);
      if (value.integer == std::numeric_limits<int64_t>::min())
        fail("integer overflow in unary '-': -(" + std::to_string(value.integer) + ") does not fit in 64 bits");
      return Value::of(-value.integer);
    }
    case Expr::Type::kTernary:
      return truthy(eval(*e.children[0])) ? eval(*e.children[1]) : eval(*e.children[2]);
    case Expr::Type::kBinary: {
      const auto& op = e.name;
      if (op == "and") {
        auto left = eval(*e.children[0]);
        return truthy(left) ? eval(*e.children[1]) : left;
      }
      if (op == "or") {
        auto left = eval(*e.children[0]);
        return truthy(left) ? left : eval(*e.children[1]);
      }
      const auto left = eval(*e.children[0]);
      const auto right = eval(*e.children[1]);
      line_ = e.line;
      if (op == "~") {
        std::string text = to_text(left);
        const std::string right_text = to_text(right);
        check_text_size(uint64_t{text.size()} + right_text.size(), "'~'");
        return Value::of(text + right_text);
      }
      if (op == "==") return Value::of(equal(left, right));
      if (op == "!=") return Value::of(!equal(left, right));
      if (op == "<") return Value::of(less(left, right));
      if (op == ">") return Value::of(less(right, left));
      if (op == "<=") return Value::of(!less(right, left));
      if (op == ">=") return Value::of(!less(left, right));
      if (op == "in") return Value::of(contains(right, left));
      if (op == "not in") return Value::of(!contains(right, left));
      return arithmetic(op, left, right);
    }
  }
  fail("unknown expression");
}

}  // namespace sao::tokenizer::jinja
