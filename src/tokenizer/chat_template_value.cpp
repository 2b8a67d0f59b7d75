#include "tokenizer/chat_template_value.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace sao::tokenizer::jinja {

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
  char buffer[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, d);
    if (std::strtod(buffer, nullptr) == d) break;
  }
  std::string text = buffer;
  if (text.find_first_of(".eni") == std::string::npos) text += ".0";
  return text;
}

namespace {

std::string json_string(const std::string& text) {
  return OrderedJson(text).dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
}

}  // namespace

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

}  // namespace sao::tokenizer::jinja
