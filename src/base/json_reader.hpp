// Strict reading of JSON objects into structs: every key that is read is
// recorded, so after reading a section the unknown (misspelt) keys can be
// reported by name together with the file they came from. Silent ignoring of
// a typo such as "learing_rate" is how RL runs waste a day.
//
// Every number key is read with its range, checked on the JSON value before
// it is converted: 4294967297 would otherwise become 1 in an int, 1e308 a
// rate that overflows, -2^63 a count that never finishes. A plain read() of
// a number does not compile, so no reader can narrow silently.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

namespace sao::base {

// The integers a key accepts, both ends included.
struct IntRange {
  int64_t low;
  int64_t high;
  bool contains(int64_t value) const { return value >= low && value <= high; }
  std::string text() const;  // "[1, 256]"
};

// The real numbers a key accepts; an open end excludes its bound, so (0, 1]
// is {0, 1, true, false}. Both ends are finite: no key accepts 1e308.
struct RealRange {
  double low;
  double high;
  bool low_open = false;
  bool high_open = false;
  // False for NaN, which compares false with every bound.
  bool contains(double value) const {
    return (low_open ? value > low : value >= low) && (high_open ? value < high : value <= high);
  }
  std::string text() const;  // "(0, 1]"
};

// Throw the message a reader gives for a value outside its range, for a
// value set in code (a preset, a test, a live knob) rather than read.
void require_in_range(const std::string& where, const char* key, int64_t value, const IntRange& range);
void require_in_range(const std::string& where, const char* key, double value, const RealRange& range);

// Whether `text` holds a NUL byte, which would cut a path short at the
// system call (a file other than the one named would be opened).
bool has_nul(const std::string& text);

// The known key nearest to `key` by edit distance, or "" when none is close
// enough to be a likely misspelling.
std::string nearest_key(const std::string& key, const std::set<std::string>& known);

class JsonReader {
 public:
  // `where` names the origin, e.g. "config/default.json: sft".
  JsonReader(const nlohmann::json& object, std::string where);

  // Strings (no NUL byte), booleans, raw JSON values and lists of strings.
  template <typename T>
  void read(const char* key, T& out) {
    static_assert(!std::is_arithmetic<T>::value || std::is_same<T, bool>::value,
                  "a number key is read with its range: read(key, out, IntRange{...}) or RealRange{...}");
    const auto* value = find(key);
    if (value == nullptr) return;  // absent keys keep their defaults
    check_type(key, *value, out);
    out = value->template get<T>();
  }
  void read(const char* key, int64_t& out, const IntRange& range);
  void read(const char* key, int& out, const IntRange& range);
  void read(const char* key, double& out, const RealRange& range);
  // Every element in `range`.
  void read(const char* key, std::vector<int64_t>& out, const IntRange& range);
  void read(const char* key, std::vector<double>& out, const RealRange& range);
  // Marks a key as known when the caller reads it by hand (an absent key
  // that only sometimes is read still belongs in the list of known keys).
  void mark_known(const char* key) { seen_.insert(key); }
  // Returns a reader for a nested object (absent -> empty object).
  JsonReader section(const char* key);
  bool has(const char* key) const { return object_.contains(key); }
  // Throws sao::Error naming every key that no read() asked for, the nearest
  // known key to each ("did you mean"), and every known key.
  void reject_unknown_keys() const;
  const std::string& where() const { return where_; }

 private:
  const nlohmann::json* find(const char* key);
  int64_t checked_integer(const char* key, const nlohmann::json& value, const IntRange& range) const;
  void check_type(const char* key, const nlohmann::json& value, bool&) const;
  void check_type(const char* key, const nlohmann::json& value, std::string&) const;
  // A raw JSON value: any type; the caller checks its shape and names the parts.
  void check_type(const char*, const nlohmann::json&, nlohmann::json&) const {}
  void check_type(const char* key, const nlohmann::json& value, std::vector<std::string>&) const;
  [[noreturn]] void fail_type(const char* key, const char* expected, const nlohmann::json& value) const;

  nlohmann::json object_;
  std::string where_;
  std::set<std::string> seen_;
};

// A section lists its keys once, in a function `keys(section, visit)` that
// calls visit("key", section.field) for each, with the range of a number
// key as a third argument; ReadKeys and WriteKeys then read and write the
// same keys, so the reader and the writer of a config cannot disagree about
// which keys exist.
struct ReadKeys {
  JsonReader& reader;
  template <typename T>
  void operator()(const char* key, T& field) const {
    reader.read(key, field);
  }
  template <typename T, typename Range>
  void operator()(const char* key, T& field, const Range& range) const {
    reader.read(key, field, range);
  }
};

struct WriteKeys {
  nlohmann::json& object;
  template <typename T>
  void operator()(const char* key, const T& field) const {
    object[key] = field;
  }
  template <typename T, typename Range>
  void operator()(const char* key, const T& field, const Range&) const {
    object[key] = field;
  }
};

// Checks every ranged key of a section built in code: keys(config,
// CheckRanges{where}) in a validate() holds it to the ranges its reader has.
struct CheckRanges {
  const std::string& where;
  template <typename T>
  void operator()(const char*, const T&) const {}
  template <typename T, typename Range>
  void operator()(const char* key, const T& field, const Range& range) const {
    require_in_range(where, key, field, range);
  }
};

}  // namespace sao::base
