// The values a chat template computes with: nlohmann JSON data plus
// Jinja's undefined, namespaces, bound methods and builtins, and the error
// type every stage of the interpreter throws through.
#pragma once

#include "base/error.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace sao::tokenizer::jinja {

using OrderedJson = nlohmann::ordered_json;

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

Value from_json(const OrderedJson& json);
const char* kind_name(const Value& v);
bool truthy(const Value& v);
// Python's repr of a float as str() prints it: shortest round-trip digits,
// with ".0" on integral values.
std::string float_text(double d);
// tojson as transformers defines it: json.dumps(ensure_ascii=False), item
// separator ", " (or "," with indent), key separator ": ".
std::string to_json_text(const Value& v, int indent, int depth);
// What {{ value }} prints: Python's str().
std::string to_text(const Value& v);
bool equal(const Value& a, const Value& b);

}  // namespace sao::tokenizer::jinja
