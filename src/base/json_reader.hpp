// Strict reading of JSON objects into structs: every key that is read is
// recorded, so after reading a section the unknown (misspelt) keys can be
// reported by name together with the file they came from. Silent ignoring of
// a typo such as "learing_rate" is how RL runs waste a day.
#pragma once

#include <nlohmann/json.hpp>

#include <set>
#include <string>

namespace sao::base {

class JsonReader {
 public:
  // `where` names the origin, e.g. "config/default.json: sft".
  JsonReader(const nlohmann::json& object, std::string where);

  template <typename T>
  void read(const char* key, T& out) {
    seen_.insert(key);
    auto it = object_.find(key);
    if (it == object_.end()) return;  // absent keys keep their defaults
    check_type(key, *it, out);
    out = it->template get<T>();
  }
  // Returns a reader for a nested object (absent -> empty object).
  JsonReader section(const char* key);
  bool has(const char* key) const { return object_.contains(key); }
  // Throws sao::Error listing every key that no read() asked for.
  void reject_unknown_keys() const;
  const std::string& where() const { return where_; }

 private:
  void check_type(const char* key, const nlohmann::json& value, bool&) const;
  void check_type(const char* key, const nlohmann::json& value, std::string&) const;
  void check_type(const char* key, const nlohmann::json& value, double&) const;
  void check_type(const char* key, const nlohmann::json& value, int64_t&) const;
  void check_type(const char* key, const nlohmann::json& value, int&) const;
  // A raw JSON value: any type; the caller checks its shape and names the parts.
  void check_type(const char*, const nlohmann::json&, nlohmann::json&) const {}
  template <typename T>
  void check_type(const char* key, const nlohmann::json& value, std::vector<T>&) const {
    if (!value.is_array()) fail_type(key, "an array", value);
    for (const auto& element : value) {
      T probe{};
      check_type(key, element, probe);
    }
  }
  [[noreturn]] void fail_type(const char* key, const char* expected, const nlohmann::json& value) const;

  nlohmann::json object_;
  std::string where_;
  std::set<std::string> seen_;
};

// A section lists its keys once, in a function `keys(section, visit)` that
// calls visit("key", section.field) for each; ReadKeys and WriteKeys then
// read and write the same keys, so the reader and the writer of a config
// cannot disagree about which keys exist.
struct ReadKeys {
  JsonReader& reader;
  template <typename T>
  void operator()(const char* key, T& field) const {
    reader.read(key, field);
  }
};

struct WriteKeys {
  nlohmann::json& object;
  template <typename T>
  void operator()(const char* key, const T& field) const {
    object[key] = field;
  }
};

}  // namespace sao::base
