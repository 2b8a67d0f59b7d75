// Strict JSON section reader; see json_reader.hpp for why.
#include "base/json_reader.hpp"

#include "base/error.hpp"
#include "base/json_parse.hpp"

#include <cmath>

namespace sao::base {

JsonReader::JsonReader(const nlohmann::json& object, std::string where)
    : object_(object.is_null() ? nlohmann::json::object() : object), where_(std::move(where)) {
  if (!object_.is_object()) {
    throw Error(where_ + ": expected a JSON object, got " + std::string(object_.type_name()));
  }
}

JsonReader JsonReader::section(const char* key) {
  seen_.insert(key);
  auto it = object_.find(key);
  if (it != object_.end() && !it->is_object()) fail_type(key, "an object", *it);
  return JsonReader(it == object_.end() ? nlohmann::json::object() : *it, where_ + "." + key);
}

void JsonReader::reject_unknown_keys() const {
  std::string unknown;
  for (const auto& item : object_.items()) {
    if (seen_.count(item.key()) == 0) unknown += (unknown.empty() ? "" : ", ") + ("'" + item.key() + "'");
  }
  if (!unknown.empty()) {
    std::string known;
    for (const auto& key : seen_) known += (known.empty() ? "" : ", ") + key;
    throw Error(where_ + ": unknown key " + unknown + " (known keys: " + known + ")");
  }
}

void JsonReader::fail_type(const char* key, const char* expected, const nlohmann::json& value) const {
  throw Error(where_ + "." + key + ": expected " + expected + ", got " + value.type_name() + " " + dump_json(value));
}

void JsonReader::check_type(const char* key, const nlohmann::json& value, bool&) const {
  if (!value.is_boolean()) fail_type(key, "true or false", value);
}

void JsonReader::check_type(const char* key, const nlohmann::json& value, std::string&) const {
  if (!value.is_string()) fail_type(key, "a string", value);
}

void JsonReader::check_type(const char* key, const nlohmann::json& value, double&) const {
  if (!value.is_number()) fail_type(key, "a number", value);
}

void JsonReader::check_type(const char* key, const nlohmann::json& value, int64_t&) const {
  const bool integral_float = value.is_number_float() && std::floor(value.get<double>()) == value.get<double>();
  if (!value.is_number_integer() && !integral_float) fail_type(key, "an integer", value);
}

void JsonReader::check_type(const char* key, const nlohmann::json& value, int&) const {
  int64_t probe = 0;
  check_type(key, value, probe);
}

}  // namespace sao::base
