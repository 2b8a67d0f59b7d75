// The values a chat template computes with: nlohmann JSON data plus
// Jinja's undefined, namespaces, bound methods and builtins, and the error
// type every stage of the interpreter throws through.
#pragma once

#include "base/error.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
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

  Value() = default;
  Value(const Value& other);  // draws on the render's ValueAllowance
  Value(Value&& other) noexcept = default;
  Value& operator=(const Value& other);
  Value& operator=(Value&& other) noexcept = default;
  ~Value();

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
    charge(v.text.size());
    return v;
  }
  static Value of(Array a) {
    Value v = make(Kind::kArray);
    v.array = std::make_shared<Array>(std::move(a));
    track(v);
    return v;
  }
  static Value of(Object o) {
    Value v = make(Kind::kObject);
    v.object = std::make_shared<Object>(std::move(o));
    track(v);
    return v;
  }
  static Value function(std::string name, std::shared_ptr<Value> self = nullptr) {
    Value v = make(Kind::kFunction);
    v.text = std::move(name);
    v.self = std::move(self);
    return v;
  }
  static Value make(Kind kind) {
    charge(sizeof(Value));
    Value v;
    v.kind = kind;
    return v;
  }
  static void charge(std::size_t bytes);
  static void track(const Value& container);

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

// The values of one render, while it lasts (on this thread).
//
// Every Value made or copied draws its size (and its string's) from the
// allowance, so a template that copies a large string in a loop, or grows a
// list by doubling, ends in a named error instead of taking the machine's
// memory.
//
// Every list and dict made is tracked, and emptied when the render ends: a
// template may put a list inside itself (`l.append(l)`, as Python allows),
// and such a cycle of shared pointers would otherwise never be freed.
class ValueAllowance {
 public:
  // `exhausted` throws; it is called once the spending passes `limit`.
  ValueAllowance(std::size_t limit, std::function<void(std::size_t limit)> exhausted);
  ~ValueAllowance();
  ValueAllowance(const ValueAllowance&) = delete;
  ValueAllowance& operator=(const ValueAllowance&) = delete;
  void spend(std::size_t bytes);
  void track(const Value& container);
  std::size_t spent() const { return spent_; }

 private:
  std::size_t limit_;
  std::size_t spent_ = 0;
  std::function<void(std::size_t)> exhausted_;
  std::vector<std::weak_ptr<Array>> arrays_;
  std::vector<std::weak_ptr<Object>> objects_;
  ValueAllowance* previous_;
};

Value from_json(const OrderedJson& json);
const char* kind_name(const Value& v);
bool truthy(const Value& v);
// Python's repr of a float as str() prints it: shortest round-trip digits,
// positional from 1e-4 up to 1e16 (with ".0" on integral values), else
// scientific ("1e+16").
std::string float_text(double d);

}  // namespace sao::tokenizer::jinja
