#include "tokenizer/chat_template/value.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace sao::tokenizer::jinja {

namespace {

thread_local ValueAllowance* active_allowance = nullptr;

}  // namespace

ValueAllowance::ValueAllowance(std::size_t limit, std::function<void(std::size_t)> exhausted)
    : limit_(limit), exhausted_(std::move(exhausted)), previous_(active_allowance) {
  active_allowance = this;
}

ValueAllowance::~ValueAllowance() {
  active_allowance = previous_;
  // Emptied through a local so each item is freed by ~Value's own loop;
  // a container freed on the way has expired by the time it is reached.
  for (const auto& tracked : arrays_) {
    if (const auto array = tracked.lock()) Array().swap(*array);
  }
  for (const auto& tracked : objects_) {
    if (const auto object = tracked.lock()) Object().swap(*object);
  }
}

void ValueAllowance::track(const Value& container) {
  if (container.array) arrays_.push_back(container.array);
  if (container.object) objects_.push_back(container.object);
}

void ValueAllowance::spend(std::size_t bytes) {
  spent_ += bytes;
  if (spent_ > limit_) exhausted_(limit_);
}

void Value::charge(std::size_t bytes) {
  if (active_allowance != nullptr) active_allowance->spend(bytes);
}

void Value::track(const Value& container) {
  if (active_allowance != nullptr) active_allowance->track(container);
}

Value::Value(const Value& other)
    : kind(other.kind),
      boolean(other.boolean),
      integer(other.integer),
      number(other.number),
      text(other.text),
      array(other.array),
      object(other.object),
      self(other.self),
      is_namespace(other.is_namespace) {
  charge(sizeof(Value) + text.size());
}

Value& Value::operator=(const Value& other) {
  if (this != &other) *this = Value(other);
  return *this;
}

// A list nested 10^5 deep would be destroyed by one recursive call per level
// and overflow the stack. Instead the items of containers this value alone
// owns move to a work list and are taken apart one level at a time, so each
// destructor only ever meets containers already emptied.
Value::~Value() {
  if (!array && !object && !self) return;
  std::vector<Value> pending;
  const auto take_items = [&pending](Value& value) {
    if (value.array && value.array.use_count() == 1) {
      for (auto& item : *value.array) pending.push_back(std::move(item));
      value.array->clear();
    }
    if (value.object && value.object.use_count() == 1) {
      for (auto& entry : *value.object) pending.push_back(std::move(entry.second));
      value.object->clear();
    }
    if (value.self && value.self.use_count() == 1) pending.push_back(std::move(*value.self));
  };
  take_items(*this);
  while (!pending.empty()) {
    Value item = std::move(pending.back());
    pending.pop_back();
    take_items(item);
  }
}

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

std::string float_text(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buffer[64];
  int digits = 1;
  for (; digits < 17; ++digits) {
    std::snprintf(buffer, sizeof(buffer), "%.*e", digits - 1, d);
    if (std::strtod(buffer, nullptr) == d) break;
  }
  std::snprintf(buffer, sizeof(buffer), "%.*e", digits - 1, d);
  const int exponent = std::atoi(std::strchr(buffer, 'e') + 1);
  if (exponent < -4 || exponent >= 16) return buffer;  // repr's switch to scientific notation
  std::snprintf(buffer, sizeof(buffer), "%.*f", std::max(0, digits - 1 - exponent), d);
  std::string text = buffer;
  if (text.find('.') == std::string::npos) text += ".0";
  return text;
}

}  // namespace sao::tokenizer::jinja
