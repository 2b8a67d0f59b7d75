// A Jinja subset for chat templates; see chat_template.hpp for why and what.
//
// Pipeline: preprocess as Hugging Face does (strip one trailing newline,
// lstrip_blocks, trim_blocks, drop {% generation %} tags), split into text,
// {{ expression }} and {% statement %} pieces with -/- whitespace control,
// parse into a tree, then evaluate over Values (nlohmann JSON data plus
// Jinja's undefined, namespaces, bound methods and builtins).
#include "tokenizer/chat_template.hpp"

#include "base/error.hpp"
#include "base/json_parse.hpp"
#include "base/small_file.hpp"
#include "base/utf8.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>
#include <variant>
#include <vector>

namespace sao::tokenizer {

namespace {

using OrderedJson = nlohmann::ordered_json;

// --- values ---------------------------------------------------------------

struct Value;
using Array = std::vector<Value>;
using Object = std::vector<std::pair<std::string, Value>>;  // insertion order, as Python dicts

struct Value {
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kArray, kObject, kFunction };
  Kind kind = Kind::kUndefined;
  bool boolean = false;
  int64_t integer = 0;
  double number = 0;
  std::string text;                // string value, or function name
  std::shared_ptr<Array> array;    // shared: Jinja lists are references
  std::shared_ptr<Object> object;  // shared: namespace attributes are assigned through it
  std::shared_ptr<Value> self;     // a bound method's receiver
  bool is_namespace = false;

  static Value none() { return make(Kind::kNone); }
  static Value of(bool b) {
    Value v = make(Kind::kBool);
    v.boolean = b;
    return v;
  }
  static Value of(int64_t i) {
    Value v = make(Kind::kInt);
    v.integer = i;
    return v;
  }
  static Value of_float(double d) {
    Value v = make(Kind::kFloat);
    v.number = d;
    return v;
  }
  static Value of(std::string s) {
    Value v = make(Kind::kString);
    v.text = std::move(s);
    return v;
  }
  static Value of(Array a) {
    Value v = make(Kind::kArray);
    v.array = std::make_shared<Array>(std::move(a));
    return v;
  }
  static Value of(Object o) {
    Value v = make(Kind::kObject);
    v.object = std::make_shared<Object>(std::move(o));
    return v;
  }
  static Value function(std::string name, std::shared_ptr<Value> self = nullptr) {
    Value v = make(Kind::kFunction);
    v.text = std::move(name);
    v.self = std::move(self);
    return v;
  }
  static Value make(Kind kind) {
    Value v;
    v.kind = kind;
    return v;
  }

  bool is(Kind k) const { return kind == k; }
  bool numeric() const { return kind == Kind::kInt || kind == Kind::kFloat; }
  double as_double() const { return kind == Kind::kInt ? static_cast<double>(integer) : number; }
  const Value* find(const std::string& key) const {
    if (!object) return nullptr;
    for (const auto& [k, v] : *object)
      if (k == key) return &v;
    return nullptr;
  }
};

Value from_json(const OrderedJson& json) {
  switch (json.type()) {
    case OrderedJson::value_t::null:
      return Value::none();
    case OrderedJson::value_t::boolean:
      return Value::of(json.get<bool>());
    case OrderedJson::value_t::number_integer:
    case OrderedJson::value_t::number_unsigned:
      return Value::of(json.get<int64_t>());
    case OrderedJson::value_t::number_float:
      return Value::of_float(json.get<double>());
    case OrderedJson::value_t::string:
      return Value::of(json.get<std::string>());
    case OrderedJson::value_t::array: {
      Array items;
      for (const auto& item : json) items.push_back(from_json(item));
      return Value::of(std::move(items));
    }
    case OrderedJson::value_t::object: {
      Object entries;
      for (const auto& [key, item] : json.items()) entries.emplace_back(key, from_json(item));
      return Value::of(std::move(entries));
    }
    default:
      return Value();
  }
}

const char* kind_name(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "undefined";
    case Value::Kind::kNone:
      return "none";
    case Value::Kind::kBool:
      return "boolean";
    case Value::Kind::kInt:
      return "integer";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "string";
    case Value::Kind::kArray:
      return "list";
    case Value::Kind::kObject:
      return "dict";
    case Value::Kind::kFunction:
      return "function";
  }
  return "?";
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.boolean;
    case Value::Kind::kInt:
      return v.integer != 0;
    case Value::Kind::kFloat:
      return v.number != 0;
    case Value::Kind::kString:
      return !v.text.empty();
    case Value::Kind::kArray:
      return !v.array->empty();
    case Value::Kind::kObject:
      return !v.object->empty();
    case Value::Kind::kFunction:
      return true;
  }
  return false;
}

// Python's repr of a float as str() prints it: shortest round-trip digits,
// with ".0" on integral values.
std::string float_text(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buffer[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, d);
    if (std::strtod(buffer, nullptr) == d) break;
  }
  std::string text = buffer;
  if (text.find_first_of(".eni") == std::string::npos) text += ".0";
  return text;
}

std::string json_string(const std::string& text) {
  return OrderedJson(text).dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
}

// tojson as transformers defines it: json.dumps(ensure_ascii=False), item
// separator ", " (or "," with indent), key separator ": ".
std::string to_json_text(const Value& v, int indent, int depth) {
  const std::string item_separator = indent > 0 ? "," : ", ";
  const std::string pad = indent > 0 ? "\n" + std::string(static_cast<size_t>(indent * depth), ' ') : "";
  const std::string child_pad = indent > 0 ? "\n" + std::string(static_cast<size_t>(indent * (depth + 1)), ' ') : "";
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
    case Value::Kind::kArray: {
      if (v.array->empty()) return "[]";
      std::string out = "[";
      for (size_t i = 0; i < v.array->size(); ++i)
        out += (i ? item_separator : "") + child_pad + to_json_text((*v.array)[i], indent, depth + 1);
      return out + pad + "]";
    }
    case Value::Kind::kObject: {
      if (v.object->empty()) return "{}";
      std::string out = "{";
      for (size_t i = 0; i < v.object->size(); ++i) {
        const auto& [key, item] = (*v.object)[i];
        out += (i ? item_separator : "") + child_pad + json_string(key) + ": " + to_json_text(item, indent, depth + 1);
      }
      return out + pad + "}";
    }
    case Value::Kind::kFunction:
      throw Error("tojson: a function cannot be serialised");
  }
  return "null";
}

// What {{ value }} prints: Python's str().
std::string to_text(const Value& v) {
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

bool equal(const Value& a, const Value& b) {
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
      if (a.array->size() != b.array->size()) return false;
      for (size_t i = 0; i < a.array->size(); ++i)
        if (!equal((*a.array)[i], (*b.array)[i])) return false;
      return true;
    case Value::Kind::kObject:
      if (a.object->size() != b.object->size()) return false;
      for (const auto& [key, item] : *a.object) {
        const auto* other = b.find(key);
        if (other == nullptr || !equal(item, *other)) return false;
      }
      return true;
    default:
      return a.object == b.object && a.text == b.text;
  }
}

// --- lexing ---------------------------------------------------------------

struct Token {
  enum class Type { kName, kString, kInt, kFloat, kOperator, kEnd };
  Type type = Type::kEnd;
  std::string text;
  int line = 1;
};

class Failure {
 public:
  Failure(std::string where, int line) : where_(std::move(where)), line_(line) {}
  [[noreturn]] void operator()(const std::string& message) const {
    throw Error(where_ + ": line " + std::to_string(line_) + ": " + message);
  }

 private:
  std::string where_;
  int line_;
};

std::vector<Token> lex_expression(const std::string& code, int line, const std::string& where) {
  std::vector<Token> tokens;
  size_t i = 0;
  const auto fail = [&](const std::string& message) { Failure(where, line)(message); };
  while (i < code.size()) {
    const char c = code[i];
    if (c == '\n') ++line;
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    Token token;
    token.line = line;
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t end = i;
      while (end < code.size() && (std::isalnum(static_cast<unsigned char>(code[end])) || code[end] == '_')) ++end;
      token.type = Token::Type::kName;
      token.text = code.substr(i, end - i);
      i = end;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t end = i;
      while (end < code.size() && std::isdigit(static_cast<unsigned char>(code[end]))) ++end;
      token.type = Token::Type::kInt;
      if (end + 1 < code.size() && code[end] == '.' && std::isdigit(static_cast<unsigned char>(code[end + 1]))) {
        ++end;
        while (end < code.size() && std::isdigit(static_cast<unsigned char>(code[end]))) ++end;
        token.type = Token::Type::kFloat;
      }
      token.text = code.substr(i, end - i);
      i = end;
    } else if (c == '\'' || c == '"') {
      std::string text;
      size_t j = i + 1;
      for (; j < code.size() && code[j] != c; ++j) {
        if (code[j] == '\n') ++line;
        if (code[j] != '\\' || j + 1 >= code.size()) {
          text += code[j];
          continue;
        }
        const char escaped = code[++j];
        switch (escaped) {
          case 'n':
            text += '\n';
            break;
          case 't':
            text += '\t';
            break;
          case 'r':
            text += '\r';
            break;
          case 'b':
            text += '\b';
            break;
          case 'f':
            text += '\f';
            break;
          case 'v':
            text += '\v';
            break;
          case '\\':
          case '\'':
          case '"':
            text += escaped;
            break;
          case 'x':
          case 'u': {
            const size_t digits = escaped == 'x' ? 2 : 4;
            const std::string hex = code.substr(j + 1, digits);
            if (hex.size() != digits || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
              fail(std::string("invalid escape \\") + escaped + hex);
            text += base::encode_utf8(static_cast<uint32_t>(std::stoul(hex, nullptr, 16)));
            j += digits;
            break;
          }
          default:
            text += '\\';
            text += escaped;
        }
      }
      if (j >= code.size()) fail("unterminated string literal");
      token.type = Token::Type::kString;
      token.text = text;
      i = j + 1;
    } else {
      static const char* const kOperators[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                               ">",  "(",  ")",  "[",  "]",  "{",  "}", ",", ".", ":", "|", "="};
      token.type = Token::Type::kOperator;
      for (const char* op : kOperators) {
        if (code.compare(i, std::char_traits<char>::length(op), op) == 0) {
          token.text = op;
          break;
        }
      }
      if (token.text.empty()) fail(std::string("unexpected character '") + c + "'");
      i += token.text.size();
    }
    tokens.push_back(std::move(token));
  }
  Token end;
  end.line = line;
  tokens.push_back(end);
  return tokens;
}

// --- the tree -------------------------------------------------------------

struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;

struct Expr {
  enum class Type {
    kLiteral,
    kName,
    kList,
    kDict,
    kAttribute,  // a.name
    kIndex,      // a[b]
    kSlice,      // a[b:c:d]
    kCall,
    kFilter,
    kTest,
    kUnary,   // not, -
    kBinary,  // + - * / // % ~ == != < > <= >= in, not in, and, or
    kTernary,
  };
  Type type = Type::kLiteral;
  int line = 1;
  Value literal;
  std::string name;               // name, attribute, filter, test, operator
  std::vector<ExprPtr> children;  // operands, list items, call/filter arguments (after the receiver)
  std::vector<std::pair<std::string, ExprPtr>> keywords;  // call/filter keyword arguments; dict entries
  bool negated = false;                                   // `is not`
};

struct Node;
using Body = std::vector<std::shared_ptr<const Node>>;

struct Node {
  enum class Type { kText, kOutput, kIf, kFor, kSet, kBreak, kContinue };
  Type type = Type::kText;
  int line = 1;
  std::string text;
  ExprPtr expr;                                    // output, set value, for iterable
  std::vector<std::pair<ExprPtr, Body>> branches;  // if/elif (condition null for else)
  std::vector<std::string> targets;                // for: loop variables; set: name [, attribute]
  ExprPtr filter;                                  // for ... if condition
  Body body;                                       // for body
  Body else_body;                                  // for ... else
};

const std::vector<std::string>& known_filters() {
  static const std::vector<std::string> names = {
      "trim",   "tojson",  "length", "count",      "string",     "upper",      "lower", "first",     "last",
      "join",   "reverse", "list",   "default",    "d",          "capitalize", "title", "replace",   "items",
      "int",    "float",   "abs",    "safe",       "unique",     "indent",     "sort",  "wordcount", "e",
      "escape", "select",  "reject", "selectattr", "rejectattr", "map"};
  return names;
}

const std::vector<std::string>& known_tests() {
  static const std::vector<std::string> names = {"defined", "undefined", "none",     "string",   "number",  "integer",
                                                 "float",   "mapping",   "iterable", "sequence", "boolean", "true",
                                                 "false",   "odd",       "even",     "equalto",  "eq",      "ne",
                                                 "in",      "callable",  "lower",    "upper"};
  return names;
}

const std::vector<std::string>& known_functions() {
  static const std::vector<std::string> names = {"namespace", "raise_exception", "range", "dict"};
  return names;
}

class Parser {
 public:
  Parser(std::vector<Token> tokens, std::string where) : tokens_(std::move(tokens)), where_(std::move(where)) {}

  ExprPtr expression() { return ternary(); }
  // A for loop's iterable: `if` after it filters the loop, not a ternary.
  ExprPtr expression_without_condition() { return or_expr(); }
  bool at_end() const { return peek().type == Token::Type::kEnd; }
  const Token& peek(size_t ahead = 0) const { return tokens_[std::min(position_ + ahead, tokens_.size() - 1)]; }
  bool peek_name(const char* name, size_t ahead = 0) const {
    return peek(ahead).type == Token::Type::kName && peek(ahead).text == name;
  }
  bool peek_op(const char* op) const { return peek().type == Token::Type::kOperator && peek().text == op; }
  Token next() { return tokens_[std::min(position_++, tokens_.size() - 1)]; }
  [[noreturn]] void fail(const std::string& message) const { Failure(where_, peek().line)(message); }
  void expect_op(const char* op) {
    if (!peek_op(op)) fail(std::string("expected '") + op + "', got '" + describe(peek()) + "'");
    next();
  }
  std::string expect_name() {
    if (peek().type != Token::Type::kName) fail("expected a name, got '" + describe(peek()) + "'");
    return next().text;
  }
  void expect_end() {
    if (!at_end()) fail("unexpected '" + describe(peek()) + "'");
  }
  static std::string describe(const Token& token) {
    return token.type == Token::Type::kEnd ? "end of tag" : token.text;
  }

 private:
  std::shared_ptr<Expr> node(Expr::Type type) {
    auto e = std::make_shared<Expr>();
    e->type = type;
    e->line = peek().line;
    return e;
  }
  ExprPtr binary(const std::string& op, ExprPtr left, ExprPtr right) {
    auto e = node(Expr::Type::kBinary);
    e->name = op;
    e->children = {std::move(left), std::move(right)};
    return e;
  }

  ExprPtr ternary() {
    const DepthGuard guard(*this);
    auto value = or_expr();
    while (peek_name("if")) {
      next();
      auto condition = or_expr();
      ExprPtr otherwise;
      if (peek_name("else")) {
        next();
        otherwise = ternary();
      } else {
        auto undefined = node(Expr::Type::kLiteral);
        otherwise = undefined;
      }
      auto e = node(Expr::Type::kTernary);
      e->children = {condition, value, otherwise};
      value = e;
    }
    return value;
  }
  ExprPtr or_expr() {
    auto left = and_expr();
    while (peek_name("or")) {
      next();
      left = binary("or", left, and_expr());
    }
    return left;
  }
  ExprPtr and_expr() {
    auto left = not_expr();
    while (peek_name("and")) {
      next();
      left = binary("and", left, not_expr());
    }
    return left;
  }
  ExprPtr not_expr() {
    const DepthGuard guard(*this);
    if (peek_name("not")) {
      next();
      auto e = node(Expr::Type::kUnary);
      e->name = "not";
      e->children = {not_expr()};
      return e;
    }
    return compare();
  }
  ExprPtr compare() {
    auto left = concat();
    for (;;) {
      if (peek().type == Token::Type::kOperator && (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
                                                    peek().text == ">" || peek().text == "<=" || peek().text == ">=")) {
        const auto op = next().text;
        left = binary(op, left, concat());
      } else if (peek_name("in")) {
        next();
        left = binary("in", left, concat());
      } else if (peek_name("not") && peek_name("in", 1)) {
        next();
        next();
        left = binary("not in", left, concat());
      } else {
        return left;
      }
    }
  }
  ExprPtr concat() {
    auto left = sum();
    while (peek_op("~")) {
      next();
      left = binary("~", left, sum());
    }
    return left;
  }
  ExprPtr sum() {
    auto left = product();
    while (peek_op("+") || peek_op("-")) {
      const auto op = next().text;
      left = binary(op, left, product());
    }
    return left;
  }
  ExprPtr product() {
    auto left = unary();
    while (peek_op("*") || peek_op("/") || peek_op("//") || peek_op("%")) {
      const auto op = next().text;
      left = binary(op, left, unary());
    }
    return left;
  }
  ExprPtr unary() {
    const DepthGuard guard(*this);
    if (peek_op("-") || peek_op("+")) {
      const auto op = next().text;
      auto e = node(Expr::Type::kUnary);
      e->name = op;
      e->children = {unary()};
      return e;
    }
    return filtered(postfix(primary()));
  }

  void arguments(Expr& call) {
    expect_op("(");
    while (!peek_op(")")) {
      if (peek().type == Token::Type::kName && peek(1).type == Token::Type::kOperator && peek(1).text == "=") {
        const auto key = next().text;
        next();
        call.keywords.emplace_back(key, expression());
      } else {
        if (!call.keywords.empty()) fail("a positional argument after a keyword argument");
        call.children.push_back(expression());
      }
      if (!peek_op(",")) break;
      next();
    }
    expect_op(")");
  }

  ExprPtr filtered(ExprPtr value) {
    for (;;) {
      if (peek_op("|")) {
        next();
        auto e = node(Expr::Type::kFilter);
        e->name = expect_name();
        const auto& filters = known_filters();
        if (std::find(filters.begin(), filters.end(), e->name) == filters.end())
          fail("filter '" + e->name + "' is not supported");
        e->children.push_back(value);
        if (peek_op("(")) arguments(*e);
        value = e;
      } else if (peek_name("is")) {
        next();
        auto e = node(Expr::Type::kTest);
        if (peek_name("not")) {
          next();
          e->negated = true;
        }
        e->name = expect_name();
        const auto& tests = known_tests();
        if (std::find(tests.begin(), tests.end(), e->name) == tests.end())
          fail("test '" + e->name + "' is not supported");
        e->children.push_back(value);
        if (peek_op("(")) {
          arguments(*e);
        } else if (peek().type == Token::Type::kString || peek().type == Token::Type::kInt ||
                   (peek().type == Token::Type::kName && !peek_name("and") && !peek_name("or") && !peek_name("else") &&
                    !peek_name("if") && !peek_name("in") && !peek_name("not"))) {
          e->children.push_back(postfix(primary()));  // `is equalto 3`, `x is sameas y`
        }
        value = e;
      } else {
        return value;
      }
    }
  }

  ExprPtr postfix(ExprPtr value) {
    for (;;) {
      if (peek_op(".")) {
        next();
        auto e = node(Expr::Type::kAttribute);
        e->name = expect_name();
        e->children = {value};
        value = e;
      } else if (peek_op("[")) {
        next();
        ExprPtr parts[3];
        bool slice = false;
        int part = 0;
        while (!peek_op("]")) {
          if (peek_op(":")) {
            next();
            slice = true;
            if (++part > 2) fail("a slice has at most three parts");
            continue;
          }
          parts[part] = expression();
        }
        expect_op("]");
        auto e = node(slice ? Expr::Type::kSlice : Expr::Type::kIndex);
        e->children = {value, parts[0], parts[1], parts[2]};
        if (!slice && !parts[0]) fail("empty subscript");
        value = e;
      } else if (peek_op("(")) {
        auto e = node(Expr::Type::kCall);
        e->children.push_back(value);
        arguments(*e);
        value = e;
      } else {
        return value;
      }
    }
  }

  // Nesting is bounded so a hostile template cannot exhaust the stack.
  struct DepthGuard {
    explicit DepthGuard(Parser& parser) : parser_(parser) {
      if (++parser_.depth_ > kMaxNesting) parser_.fail("expressions nest deeper than " + std::to_string(kMaxNesting));
    }
    ~DepthGuard() { --parser_.depth_; }
    Parser& parser_;
  };
  static constexpr int kMaxNesting = 200;

  ExprPtr primary() {
    const DepthGuard guard(*this);
    const Token token = next();
    auto literal = [&](Value v) {
      auto e = std::make_shared<Expr>();
      e->type = Expr::Type::kLiteral;
      e->line = token.line;
      e->literal = std::move(v);
      return e;
    };
    switch (token.type) {
      case Token::Type::kString: {
        std::string text = token.text;
        while (peek().type == Token::Type::kString) text += next().text;  // adjacent literals join
        return literal(Value::of(text));
      }
      case Token::Type::kInt:
      case Token::Type::kFloat:
        try {
          if (token.type == Token::Type::kFloat) return literal(Value::of_float(std::stod(token.text)));
          return literal(Value::of(static_cast<int64_t>(std::stoll(token.text))));
        } catch (const std::out_of_range&) {
          Failure(where_, token.line)("number " + token.text + " is out of range");
        }
      case Token::Type::kName: {
        if (token.text == "true" || token.text == "True") return literal(Value::of(true));
        if (token.text == "false" || token.text == "False") return literal(Value::of(false));
        if (token.text == "none" || token.text == "None") return literal(Value::none());
        auto e = std::make_shared<Expr>();
        e->type = Expr::Type::kName;
        e->line = token.line;
        e->name = token.text;
        return e;
      }
      case Token::Type::kOperator:
        if (token.text == "(") {
          auto inner = expression();
          if (peek_op(",")) {  // a tuple: a list for our purposes
            auto list = std::make_shared<Expr>();
            list->type = Expr::Type::kList;
            list->line = token.line;
            list->children.push_back(inner);
            while (peek_op(",")) {
              next();
              if (peek_op(")")) break;
              list->children.push_back(expression());
            }
            expect_op(")");
            return list;
          }
          expect_op(")");
          return inner;
        }
        if (token.text == "[") {
          auto list = std::make_shared<Expr>();
          list->type = Expr::Type::kList;
          list->line = token.line;
          while (!peek_op("]")) {
            list->children.push_back(expression());
            if (!peek_op(",")) break;
            next();
          }
          expect_op("]");
          return list;
        }
        if (token.text == "{") {
          auto dict = std::make_shared<Expr>();
          dict->type = Expr::Type::kDict;
          dict->line = token.line;
          while (!peek_op("}")) {
            if (peek().type != Token::Type::kString) fail("dict keys must be string literals");
            const auto key = next().text;
            expect_op(":");
            dict->keywords.emplace_back(key, expression());
            if (!peek_op(",")) break;
            next();
          }
          expect_op("}");
          return dict;
        }
        break;
      default:
        break;
    }
    Failure(where_, token.line)("unexpected '" + describe(token) + "'");
  }

  std::vector<Token> tokens_;
  size_t position_ = 0;
  int depth_ = 0;
  std::string where_;
};

// --- template structure ---------------------------------------------------

struct TemplatePiece {
  enum class Type { kText, kOutput, kStatement };
  Type type;
  std::string text;
  int line;
};

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Hugging Face's preprocessing of a chat template before Jinja sees it:
// one trailing newline dropped; lstrip_blocks (spaces and tabs before a
// {% or {# that starts a line); trim_blocks (the newline after %}, #} or
// -}); transformers' {% generation %} / {% endgeneration %} tags, which
// mark assistant text for masks, removed (honouring their -). Written as
// loops, not regexes: std::regex recurses per character and a long
// template could exhaust the stack.
std::string preprocess(std::string source) {
  if (!source.empty() && source.back() == '\n') source.pop_back();
  std::string stripped;
  stripped.reserve(source.size());
  for (size_t i = 0; i < source.size();) {
    if (i == 0 || source[i - 1] == '\n') {
      size_t j = i;
      while (j < source.size() && (source[j] == ' ' || source[j] == '\t')) ++j;
      if (j + 1 < source.size() && source[j] == '{' &&
          (source[j + 1] == '%' || source[j + 1] == '#' || source[j + 1] == '-'))
        i = j;
    }
    stripped += source[i];
    // trim_blocks
    if (source[i] == '}' && i >= 1 && (source[i - 1] == '%' || source[i - 1] == '#' || source[i - 1] == '-') &&
        i + 1 < source.size() && source[i + 1] == '\n') {
      i += 2;
      continue;
    }
    ++i;
  }
  std::string out;
  out.reserve(stripped.size());
  size_t last = 0;
  for (size_t open = stripped.find("{%"); open != std::string::npos; open = stripped.find("{%", open + 2)) {
    size_t j = open + 2;
    const bool left_trim = j < stripped.size() && stripped[j] == '-';
    if (left_trim) ++j;
    while (j < stripped.size() && is_space(stripped[j])) ++j;
    const char* names[] = {"generation", "endgeneration"};
    size_t name_end = std::string::npos;
    for (const char* name : names) {
      const size_t length = std::char_traits<char>::length(name);
      if (stripped.compare(j, length, name) == 0) name_end = j + length;
    }
    if (name_end == std::string::npos) continue;
    j = name_end;
    while (j < stripped.size() && is_space(stripped[j])) ++j;
    const bool right_trim = j < stripped.size() && stripped[j] == '-';
    if (right_trim) ++j;
    if (stripped.compare(j, 2, "%}") != 0) continue;
    size_t end = open;
    if (left_trim)
      while (end > last && is_space(stripped[end - 1])) --end;
    out += stripped.substr(last, end - last);
    last = j + 2;
    if (right_trim)
      while (last < stripped.size() && is_space(stripped[last])) ++last;
    open = last - 2;
  }
  return out + stripped.substr(last);
}

std::vector<TemplatePiece> split_pieces(const std::string& source, const std::string& where) {
  std::vector<TemplatePiece> pieces;
  size_t i = 0;
  int line = 1;
  bool strip_next_text = false;
  auto count_lines = [](const std::string& text) {
    return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
  };
  while (i < source.size()) {
    size_t open = source.find('{', i);
    while (open != std::string::npos && open + 1 < source.size() && source[open + 1] != '{' &&
           source[open + 1] != '%' && source[open + 1] != '#')
      open = source.find('{', open + 1);
    if (open == std::string::npos || open + 1 >= source.size()) open = source.size();
    std::string text = source.substr(i, open - i);
    if (strip_next_text) {
      size_t start = 0;
      while (start < text.size() && is_space(text[start])) ++start;
      text = text.substr(start);
    }
    strip_next_text = false;
    const int text_line = line;
    line += count_lines(source.substr(i, open - i));
    if (open == source.size()) {
      if (!text.empty()) pieces.push_back({TemplatePiece::Type::kText, text, text_line});
      break;
    }
    const char kind = source[open + 1];
    const std::string closer = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    size_t content_begin = open + 2;
    if (content_begin < source.size() && source[content_begin] == '-') {
      while (!text.empty() && is_space(text.back())) text.pop_back();
      ++content_begin;
    } else if (content_begin < source.size() && source[content_begin] == '+') {
      ++content_begin;
    }
    if (!text.empty()) pieces.push_back({TemplatePiece::Type::kText, text, text_line});
    // The closer is searched outside string literals: '}}' may sit in one.
    size_t close = content_begin;
    char quote = 0;
    for (; close < source.size(); ++close) {
      const char c = source[close];
      if (quote != 0) {
        if (c == '\\') {
          ++close;
        } else if (c == quote) {
          quote = 0;
        }
        continue;
      }
      if (kind != '#' && (c == '\'' || c == '"')) {
        quote = c;
        continue;
      }
      if (source.compare(close, 2, closer) == 0) break;
    }
    if (close >= source.size()) Failure(where, line)("'" + source.substr(open, 2) + "' is never closed");
    size_t content_end = close;
    if (content_end > content_begin && source[content_end - 1] == '-') {
      --content_end;
      strip_next_text = true;
    } else if (content_end > content_begin && source[content_end - 1] == '+') {
      --content_end;
    }
    const std::string content = source.substr(content_begin, content_end - content_begin);
    if (kind == '{') pieces.push_back({TemplatePiece::Type::kOutput, content, line});
    if (kind == '%') pieces.push_back({TemplatePiece::Type::kStatement, content, line});
    line += count_lines(source.substr(open, close + 2 - open));
    i = close + 2;
  }
  return pieces;
}

class TreeBuilder {
 public:
  TreeBuilder(std::vector<TemplatePiece> pieces, std::string where)
      : pieces_(std::move(pieces)), where_(std::move(where)) {}

  Body build() {
    std::string stop;
    auto body = parse_body({}, &stop);
    if (!stop.empty()) Failure(where_, line_)("'" + stop + "' without an opening tag");
    return body;
  }

 private:
  // Parses until one of `stops` (a statement keyword) and returns it in `stop`.
  Body parse_body(const std::vector<std::string>& stops, std::string* stop, Parser** stop_parser = nullptr) {
    // Bounded so that 10^5 nested ifs are an error, not a stack overflow.
    struct Nesting {
      explicit Nesting(TreeBuilder& builder) : builder_(builder) {
        if (++builder_.nesting_ > 100) Failure(builder_.where_, builder_.line_)("blocks nest deeper than 100");
      }
      ~Nesting() { --builder_.nesting_; }
      TreeBuilder& builder_;
    } nesting(*this);
    Body body;
    while (index_ < pieces_.size()) {
      const auto& piece = pieces_[index_++];
      line_ = piece.line;
      auto node = std::make_shared<Node>();
      node->line = piece.line;
      if (piece.type == TemplatePiece::Type::kText) {
        node->type = Node::Type::kText;
        node->text = piece.text;
        body.push_back(node);
        continue;
      }
      if (piece.type == TemplatePiece::Type::kOutput) {
        Parser parser(lex_expression(piece.text, piece.line, where_), where_);
        node->type = Node::Type::kOutput;
        node->expr = parser.expression();
        parser.expect_end();
        body.push_back(node);
        continue;
      }
      parsers_.push_back(std::make_unique<Parser>(lex_expression(piece.text, piece.line, where_), where_));
      Parser& parser = *parsers_.back();
      const std::string keyword = parser.expect_name();
      if (std::find(stops.begin(), stops.end(), keyword) != stops.end()) {
        *stop = keyword;
        if (stop_parser != nullptr) *stop_parser = &parser;
        return body;
      }
      if (keyword == "if") {
        node->type = Node::Type::kIf;
        auto condition = parser.expression();
        parser.expect_end();
        for (;;) {
          std::string ended;
          Parser* at = nullptr;
          auto branch = parse_body({"elif", "else", "endif"}, &ended, &at);
          node->branches.emplace_back(condition, std::move(branch));
          if (ended.empty()) Failure(where_, piece.line)("'if' is never closed with 'endif'");
          if (ended == "endif") {
            at->expect_end();
            break;
          }
          if (ended == "else") {
            at->expect_end();
            condition = nullptr;
            auto last = parse_body({"endif"}, &ended, &at);
            if (ended.empty()) Failure(where_, piece.line)("'if' is never closed with 'endif'");
            at->expect_end();
            node->branches.emplace_back(nullptr, std::move(last));
            break;
          }
          condition = at->expression();
          at->expect_end();
        }
      } else if (keyword == "for") {
        node->type = Node::Type::kFor;
        node->targets.push_back(parser.expect_name());
        while (parser.peek_op(",")) {
          parser.next();
          node->targets.push_back(parser.expect_name());
        }
        if (!parser.peek_name("in")) parser.fail("expected 'in' in the for statement");
        parser.next();
        node->expr = parser.expression_without_condition();
        if (parser.peek_name("if")) {
          parser.next();
          node->filter = parser.expression();
        }
        if (parser.peek_name("recursive")) parser.fail("recursive loops are not supported");
        parser.expect_end();
        std::string ended;
        Parser* at = nullptr;
        node->body = parse_body({"else", "endfor"}, &ended, &at);
        if (ended.empty()) Failure(where_, piece.line)("'for' is never closed with 'endfor'");
        at->expect_end();
        if (ended == "else") {
          node->else_body = parse_body({"endfor"}, &ended, &at);
          if (ended.empty()) Failure(where_, piece.line)("'for' is never closed with 'endfor'");
          at->expect_end();
        }
      } else if (keyword == "set") {
        node->type = Node::Type::kSet;
        node->targets.push_back(parser.expect_name());
        if (parser.peek_op(".")) {
          parser.next();
          node->targets.push_back(parser.expect_name());
        }
        if (!parser.peek_op("=")) parser.fail("block assignments ({% set x %}...{% endset %}) are not supported");
        parser.next();
        node->expr = parser.expression();
        parser.expect_end();
      } else if (keyword == "break" || keyword == "continue") {
        node->type = keyword == "break" ? Node::Type::kBreak : Node::Type::kContinue;
        parser.expect_end();
      } else {
        parser.fail("statement '" + keyword + "' is not supported");
      }
      body.push_back(node);
    }
    return body;
  }

  std::vector<TemplatePiece> pieces_;
  size_t index_ = 0;
  int nesting_ = 0;
  int line_ = 1;
  std::string where_;
  std::vector<std::unique_ptr<Parser>> parsers_;
};

}  // namespace

struct ChatTemplate::Program {
  Body body;
  std::string where;
};

namespace {

// --- evaluation -----------------------------------------------------------

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
 public:
  Renderer(const std::string& where, const OrderedJson& variables) : where_(where) {
    scopes_.emplace_back();
    if (variables.is_object()) {
      for (const auto& [key, value] : variables.items()) scopes_.back()[key] = from_json(value);
    }
  }

  Flow run(const Body& body, std::string& out) {
    for (const auto& node : body) {
      line_ = node->line;
      // A template is data from a model directory: bounded work and output,
      // so nested range() loops end in an error, not a hang.
      if (++steps_ > kMaxSteps) fail("the template runs more than " + std::to_string(kMaxSteps) + " steps");
      if (out.size() > kMaxOutputBytes)
        fail("the template writes more than " + std::to_string(kMaxOutputBytes) + " bytes");
      switch (node->type) {
        case Node::Type::kText:
          out += node->text;
          break;
        case Node::Type::kOutput:
          out += to_text(eval(*node->expr));
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

 private:
  [[noreturn]] void fail(const std::string& message) const { Failure(where_, line_)(message); }

  Value lookup(const std::string& name) const {
    for (auto scope = scopes_.rbegin(); scope != scopes_.rend(); ++scope) {
      const auto it = scope->find(name);
      if (it != scope->end()) return it->second;
    }
    const auto& functions = known_functions();
    if (std::find(functions.begin(), functions.end(), name) != functions.end()) return Value::function(name);
    return Value();
  }

  void assign(const Node& node) {
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

  std::vector<Value> iterate(const Value& value) {
    if (value.is(Value::Kind::kArray)) return *value.array;
    if (value.is(Value::Kind::kObject)) {
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
        characters.push_back(Value::of(value.text.substr(i, length)));
        i += length;
      }
      return characters;
    }
    if (value.is(Value::Kind::kUndefined) || value.is(Value::Kind::kNone)) return {};
    fail(std::string("cannot iterate over a ") + kind_name(value));
  }

  void run_for(const Node& node, std::string& out) {
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
      if (++steps_ > kMaxSteps) fail("the template runs more than " + std::to_string(kMaxSteps) + " steps");
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

  void bind_targets(const Node& node, const Value& item) {
    if (node.targets.size() == 1) {
      scopes_.back()[node.targets[0]] = item;
      return;
    }
    if (!item.is(Value::Kind::kArray) || item.array->size() != node.targets.size())
      fail("cannot unpack a " + std::string(kind_name(item)) + " into " + std::to_string(node.targets.size()) +
           " loop variables");
    for (size_t k = 0; k < node.targets.size(); ++k) scopes_.back()[node.targets[k]] = (*item.array)[k];
  }

  int64_t as_index(const Value& v, const char* what) const {
    if (!v.is(Value::Kind::kInt)) fail(std::string(what) + " must be an integer, got a " + kind_name(v));
    return v.integer;
  }

  Value attribute(const Value& value, const std::string& name) {
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

  Value index(const Value& value, const Value& key) {
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

  Value slice(const Value& value, const Expr& e) {
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
    if (value.is(Value::Kind::kString)) {
      std::string text;
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) text += value.text[static_cast<size_t>(i)];
      return Value::of(text);
    }
    Array items;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
      items.push_back((*value.array)[static_cast<size_t>(i)]);
    return Value::of(std::move(items));
  }

  // Python's str.strip: with `chars`, exactly those characters; without,
  // every character str.isspace() accepts (ASCII and Unicode spaces).
  static std::string strip_chars(const std::string& text, const Value* chars, bool left, bool right) {
    if (chars != nullptr && chars->is(Value::Kind::kString)) {
      const auto& set = chars->text;
      size_t begin = 0, end = text.size();
      if (left)
        while (begin < end && set.find(text[begin]) != std::string::npos) ++begin;
      if (right)
        while (end > begin && set.find(text[end - 1]) != std::string::npos) --end;
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

  Value call_method(const Value& function, const std::vector<Value>& args) {
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
      for (size_t found; (found = self.text.find(separator, begin)) != std::string::npos && max_split != 0;
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
      const auto found = self.text.find(arg_string(0));
      return Value::of(found == std::string::npos ? int64_t{-1} : static_cast<int64_t>(found));
    }
    if (name == "str.count") {
      const auto& needle = arg_string(0);
      int64_t count = 0;
      if (!needle.empty())
        for (size_t at = self.text.find(needle); at != std::string::npos;
             at = self.text.find(needle, at + needle.size()))
          ++count;
      return Value::of(count);
    }
    if (name == "str.join") {
      if (args.empty()) fail("join needs a list");
      std::string text;
      const auto items = iterate(args[0]);
      for (size_t i = 0; i < items.size(); ++i) text += (i ? self.text : "") + to_text(items[i]);
      return Value::of(text);
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

  Value call(const Expr& e) {
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
      if ((stop - start) / step > 100000) fail("range of more than 100000 items");
      Array items;
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) items.push_back(Value::of(i));
      return Value::of(std::move(items));
    }
    fail("function '" + name + "' is not supported");
  }

  Value apply_filter(const std::string& name, const Value& value, const std::vector<Value>& args,
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
      return Value::of(to_json_text(
          value, indent != nullptr && indent->is(Value::Kind::kInt) ? static_cast<int>(indent->integer) : 0, 0));
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
      const std::string separator = args.empty() ? "" : to_text(args[0]);
      std::string text;
      const auto items = iterate(value);
      for (size_t i = 0; i < items.size(); ++i) text += (i ? separator : "") + to_text(items[i]);
      return Value::of(text);
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
      for (size_t found; (found = text.find(from, begin)) != std::string::npos; begin = found + from.size())
        out += text.substr(begin, found - begin) + to;
      return Value::of(out + text.substr(begin));
    }
    if (name == "items") return call_method(Value::function("dict.items", std::make_shared<Value>(value)), {});
    if (name == "int") {
      if (value.is(Value::Kind::kInt)) return value;
      if (value.is(Value::Kind::kFloat)) return Value::of(static_cast<int64_t>(value.number));
      if (value.is(Value::Kind::kString)) {
        try {
          return Value::of(static_cast<int64_t>(std::stoll(value.text)));
        } catch (const std::exception&) {
          return Value::of(int64_t{0});
        }
      }
      return Value::of(int64_t{0});
    }
    if (name == "float") return Value::of_float(value.numeric() ? value.as_double() : 0.0);
    if (name == "abs") {
      if (value.is(Value::Kind::kInt)) return Value::of(value.integer < 0 ? -value.integer : value.integer);
      return Value::of_float(std::fabs(value.as_double()));
    }
    if (name == "safe" || name == "e" || name == "escape") return value;  // chat templates render unescaped
    if (name == "indent") {
      const int64_t width = args.empty() ? 4 : as_index(args[0], "indent's width");
      const std::string pad(static_cast<size_t>(std::max<int64_t>(0, width)), ' ');
      std::string text = to_text(value), out;
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

  bool apply_test(const std::string& name, const Value& value, const std::vector<Value>& args) {
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

  bool contains(const Value& container, const Value& item) {
    if (container.is(Value::Kind::kString)) {
      if (!item.is(Value::Kind::kString)) fail("'in <string>' needs a string on the left");
      return container.text.find(item.text) != std::string::npos;
    }
    if (container.is(Value::Kind::kArray))
      return std::any_of(container.array->begin(), container.array->end(),
                         [&](const Value& v) { return equal(v, item); });
    if (container.is(Value::Kind::kObject))
      return item.is(Value::Kind::kString) && container.find(item.text) != nullptr;
    if (container.is(Value::Kind::kUndefined)) return false;
    fail(std::string("'in' a ") + kind_name(container));
  }

  Value arithmetic(const std::string& op, const Value& a, const Value& b) {
    if (op == "+" && a.is(Value::Kind::kString) && b.is(Value::Kind::kString)) return Value::of(a.text + b.text);
    if (op == "+" && a.is(Value::Kind::kArray) && b.is(Value::Kind::kArray)) {
      Array items = *a.array;
      items.insert(items.end(), b.array->begin(), b.array->end());
      return Value::of(std::move(items));
    }
    if (op == "*" && a.is(Value::Kind::kString) && b.is(Value::Kind::kInt)) {
      std::string text;
      for (int64_t i = 0; i < std::min<int64_t>(b.integer, 100000); ++i) text += a.text;
      return Value::of(text);
    }
    if (!a.numeric() || !b.numeric())
      fail("unsupported operand types for " + op + ": " + kind_name(a) + " and " + kind_name(b));
    const bool integers = a.is(Value::Kind::kInt) && b.is(Value::Kind::kInt);
    if (op == "/") {
      if (b.as_double() == 0) fail("division by zero");
      return Value::of_float(a.as_double() / b.as_double());
    }
    if (integers) {
      const int64_t x = a.integer, y = b.integer;
      if (op == "+") return Value::of(x + y);
      if (op == "-") return Value::of(x - y);
      if (op == "*") return Value::of(x * y);
      if (y == 0) fail("division by zero");
      const int64_t floor_div = x / y - ((x % y != 0) && ((x < 0) != (y < 0)));
      if (op == "//") return Value::of(floor_div);
      return Value::of(x - floor_div * y);  // Python's % takes the divisor's sign
    }
    const double x = a.as_double(), y = b.as_double();
    if (op == "+") return Value::of_float(x + y);
    if (op == "-") return Value::of_float(x - y);
    if (op == "*") return Value::of_float(x * y);
    if (y == 0) fail("division by zero");
    if (op == "//") return Value::of_float(std::floor(x / y));
    return Value::of_float(x - std::floor(x / y) * y);
  }

  bool less(const Value& a, const Value& b) {
    if (a.numeric() && b.numeric()) return a.as_double() < b.as_double();
    if (a.is(Value::Kind::kString) && b.is(Value::Kind::kString)) return a.text < b.text;
    fail(std::string("cannot order a ") + kind_name(a) + " and a " + kind_name(b));
  }

  Value eval(const Expr& e) {
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
        return value.is(Value::Kind::kInt) ? Value::of(-value.integer) : Value::of_float(-value.number);
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
        if (op == "~") return Value::of(to_text(left) + to_text(right));
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

  static constexpr int64_t kMaxSteps = 1'000'000;
  static constexpr size_t kMaxOutputBytes = 64u << 20;
  std::string where_;
  int line_ = 1;
  int64_t steps_ = 0;
  std::vector<std::map<std::string, Value>> scopes_;
};

}  // namespace

ChatTemplate ChatTemplate::parse(const std::string& source, const std::string& where) {
  if (source.size() > (1u << 20))
    throw Error(where + ": " + std::to_string(source.size()) + " bytes, over the 1 MiB limit for a chat template");
  auto program = std::make_shared<Program>();
  program->where = where;
  program->body = TreeBuilder(split_pieces(preprocess(source), where), where).build();
  return ChatTemplate(std::move(program));
}

std::string ChatTemplate::render(const nlohmann::ordered_json& variables) const {
  Renderer renderer(program_->where, variables);
  std::string out;
  renderer.run(program_->body, out);
  return out;
}

std::optional<ChatTemplate> load_chat_template(const std::string& model_directory) {
  namespace fs = std::filesystem;
  const fs::path dir(model_directory);
  std::error_code error;
  const auto read = [](const fs::path& path) { return base::read_small_file(path); };
  // Present (a FIFO included) means it is read, and refused if not a regular file.
  if (fs::exists(fs::symlink_status(dir / "chat_template.jinja", error)))
    return ChatTemplate::parse(read(dir / "chat_template.jinja"), (dir / "chat_template.jinja").string());
  const auto config_path = dir / "tokenizer_config.json";
  if (!fs::exists(fs::symlink_status(config_path, error))) return std::nullopt;
  const auto config = base::parse_json_limited(read(config_path), config_path.string());
  if (!config.is_object() || !config.contains("chat_template") || config["chat_template"].is_null())
    return std::nullopt;
  const auto& value = config["chat_template"];
  const std::string where = config_path.string() + ": chat_template";
  if (value.is_string()) return ChatTemplate::parse(value.get<std::string>(), where);
  if (value.is_array()) {
    for (const auto& entry : value) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string())
        return ChatTemplate::parse(entry["template"].get<std::string>(), where + "[default]");
    }
    throw Error(where + ": a list of named templates without one named \"default\"");
  }
  throw Error(where + ": expected a string or a list of {\"name\", \"template\"}");
}

}  // namespace sao::tokenizer
