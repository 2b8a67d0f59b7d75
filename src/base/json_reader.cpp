// Strict JSON section reader; see json_reader.hpp for why.
#include "base/json_reader.hpp"

#include "base/error.hpp"
#include "base/json_parse.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

namespace sao::base {

namespace {

// The shortest text that reads back as `value`: 4294967298, not 4.29497e+09.
std::string real_text(double value) {
  std::string text;
  for (int precision = 6; precision <= 17; ++precision) {
    std::ostringstream out;
    out.precision(precision);
    out << value;
    text = out.str();
    if (std::strtod(text.c_str(), nullptr) == value) break;
  }
  return text;
}

// Levenshtein distance: the edits that turn one key into the other.
size_t edit_distance(const std::string& from, const std::string& to) {
  std::vector<size_t> row(to.size() + 1);
  for (size_t j = 0; j <= to.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= from.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= to.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (from[i - 1] == to[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[to.size()];
}

}  // namespace

std::string IntRange::text() const {
  return "[" + std::to_string(low) + ", " + std::to_string(high) + "]";
}

std::string RealRange::text() const {
  return (low_open ? "(" : "[") + real_text(low) + ", " + real_text(high) + (high_open ? ")" : "]");
}

void require_in_range(const std::string& where, const char* key, int64_t value, const IntRange& range) {
  if (!range.contains(value)) {
    throw Error(where + "." + key + ": must be an integer in " + range.text() + ", got " + std::to_string(value));
  }
}

void require_in_range(const std::string& where, const char* key, double value, const RealRange& range) {
  if (!range.contains(value)) {
    throw Error(where + "." + key + ": must be a number in " + range.text() + ", got " + real_text(value));
  }
}

bool has_nul(const std::string& text) {
  return text.find('\0') != std::string::npos;
}

std::string nearest_key(const std::string& key, const std::set<std::string>& known) {
  // A third of the key's letters, at least 2: "verifer" -> "verifier",
  // "learing_rate" -> "learning_rate", but "x" suggests nothing.
  const size_t threshold = std::max<size_t>(2, key.size() / 3);
  std::string nearest;
  size_t best = threshold + 1;
  for (const auto& candidate : known) {
    const size_t distance = edit_distance(key, candidate);
    if (distance < best) {
      best = distance;
      nearest = candidate;
    }
  }
  return nearest;
}

JsonReader::JsonReader(const nlohmann::json& object, std::string where)
    : object_(object.is_null() ? nlohmann::json::object() : object), where_(std::move(where)) {
  if (!object_.is_object()) {
    throw Error(where_ + ": expected a JSON object, got " + std::string(object_.type_name()));
  }
}

const nlohmann::json* JsonReader::find(const char* key) {
  seen_.insert(key);
  const auto it = object_.find(key);
  return it == object_.end() ? nullptr : &*it;
}

JsonReader JsonReader::section(const char* key) {
  const auto* value = find(key);
  if (value != nullptr && !value->is_object()) fail_type(key, "an object", *value);
  return JsonReader(value == nullptr ? nlohmann::json::object() : *value, where_ + "." + key);
}

void JsonReader::reject_unknown_keys() const {
  std::string unknown;
  size_t count = 0;
  for (const auto& item : object_.items()) {
    if (seen_.count(item.key()) != 0) continue;
    const auto nearest = nearest_key(item.key(), seen_);
    unknown += (unknown.empty() ? "" : ", ") + ("'" + item.key() + "'");
    if (!nearest.empty()) unknown += " (did you mean '" + nearest + "'?)";
    ++count;
  }
  if (count == 0) return;
  std::string known;
  for (const auto& key : seen_) known += (known.empty() ? "" : ", ") + key;
  throw Error(where_ + ": unknown key" + (count > 1 ? "s " : " ") + unknown + "; known keys: " + known);
}

void JsonReader::fail_type(const char* key, const char* expected, const nlohmann::json& value) const {
  throw Error(where_ + "." + key + ": expected " + expected + ", got " + value.type_name() + " " + dump_json(value));
}

int64_t JsonReader::checked_integer(const char* key, const nlohmann::json& value, const IntRange& range) const {
  // Each JSON number kind is compared in its own type, so no value is
  // converted (and wrapped) before it is known to fit.
  bool in_range = false;
  int64_t result = 0;
  if (value.is_number_unsigned()) {
    const auto number = value.get<uint64_t>();
    in_range = range.high >= 0 && number <= static_cast<uint64_t>(range.high) &&
               (range.low <= 0 || number >= static_cast<uint64_t>(range.low));
    result = in_range ? static_cast<int64_t>(number) : 0;
  } else if (value.is_number_integer()) {
    result = value.get<int64_t>();
    in_range = range.contains(result);
  } else if (value.is_number_float()) {
    const double number = value.get<double>();
    // Bounds below 2^53 compare exactly as doubles; 2^62 keeps the cast defined.
    in_range = std::floor(number) == number && std::fabs(number) < 0x1p62 && number >= static_cast<double>(range.low) &&
               number <= static_cast<double>(range.high);
    result = in_range ? static_cast<int64_t>(number) : 0;
  }
  if (!in_range) {
    throw Error(where_ + "." + key + ": must be an integer in " + range.text() + ", got " +
                (value.is_number() ? "" : std::string(value.type_name()) + " ") + dump_json(value));
  }
  return result;
}

void JsonReader::read(const char* key, int64_t& out, const IntRange& range) {
  const auto* value = find(key);
  if (value != nullptr) out = checked_integer(key, *value, range);
}

void JsonReader::read(const char* key, int& out, const IntRange& range) {
  const IntRange narrowed{std::max<int64_t>(range.low, std::numeric_limits<int>::min()),
                          std::min<int64_t>(range.high, std::numeric_limits<int>::max())};
  const auto* value = find(key);
  if (value != nullptr) out = static_cast<int>(checked_integer(key, *value, narrowed));
}

void JsonReader::read(const char* key, double& out, const RealRange& range) {
  const auto* value = find(key);
  if (value == nullptr) return;
  if (!value->is_number()) {
    throw Error(where_ + "." + key + ": must be a number in " + range.text() + ", got " + value->type_name() + " " +
                dump_json(*value));
  }
  // The value as written ("got 4294967298"), not as a double prints.
  if (!range.contains(value->get<double>())) {
    throw Error(where_ + "." + key + ": must be a number in " + range.text() + ", got " + dump_json(*value));
  }
  out = value->get<double>();
}

void JsonReader::read(const char* key, std::vector<int64_t>& out, const IntRange& range) {
  const auto* value = find(key);
  if (value == nullptr) return;
  if (!value->is_array()) fail_type(key, "an array of integers", *value);
  std::vector<int64_t> numbers;
  for (const auto& element : *value) numbers.push_back(checked_integer(key, element, range));
  out = std::move(numbers);
}

void JsonReader::read(const char* key, std::vector<double>& out, const RealRange& range) {
  const auto* value = find(key);
  if (value == nullptr) return;
  if (!value->is_array()) fail_type(key, "an array of numbers", *value);
  std::vector<double> numbers;
  for (const auto& element : *value) {
    if (!element.is_number()) fail_type(key, "an array of numbers", *value);
    require_in_range(where_, key, element.get<double>(), range);
    numbers.push_back(element.get<double>());
  }
  out = std::move(numbers);
}

void JsonReader::check_type(const char* key, const nlohmann::json& value, bool&) const {
  if (!value.is_boolean()) fail_type(key, "true or false", value);
}

void JsonReader::check_type(const char* key, const nlohmann::json& value, std::string&) const {
  if (!value.is_string()) fail_type(key, "a string", value);
  // A NUL cuts a path (or a command, a URL) short at the system call.
  if (has_nul(value.get_ref<const std::string&>())) {
    throw Error(where_ + "." + key + ": must not contain a NUL byte, got " + dump_json(value));
  }
}

void JsonReader::check_type(const char* key, const nlohmann::json& value, std::vector<std::string>&) const {
  if (!value.is_array()) fail_type(key, "an array", value);
  for (const auto& element : value) {
    std::string probe;
    check_type(key, element, probe);
  }
}

}  // namespace sao::base
