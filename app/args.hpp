// Command-line parsing for `sao <command> [options]`: a small, strict parser
// (unknown flags are errors that name the flag and the command).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace sao::cli {

struct FlagSpec {
  std::string name;  // "--config"
  bool takes_value;  // false for switches such as --json
  bool repeatable;   // --set may be given many times
  std::string help;
};

struct ParsedArgs {
  std::map<std::string, std::vector<std::string>> values;  // flag -> values (switches get "")
  std::vector<std::string> positional;

  bool has(const std::string& flag) const { return values.count(flag) > 0; }
  std::string get(const std::string& flag, const std::string& fallback = "") const;
  std::vector<std::string> all(const std::string& flag) const;
  int64_t get_int(const std::string& flag, int64_t fallback) const;
  double get_double(const std::string& flag, double fallback) const;  // finite numbers only
};

// Throws sao::Error for unknown flags, missing values, or a repeated
// non-repeatable flag.
ParsedArgs parse_args(const std::string& command, const std::vector<FlagSpec>& specs,
                      const std::vector<std::string>& args);
std::string flags_help(const std::vector<FlagSpec>& specs);

}  // namespace sao::cli
