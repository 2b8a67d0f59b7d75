// Strict flag parsing; see args.hpp.
#include "app/args.hpp"

#include "base/error.hpp"

#include <algorithm>
#include <cmath>

namespace sao::cli {

std::string ParsedArgs::get(const std::string& flag, const std::string& fallback) const {
  auto it = values.find(flag);
  return it == values.end() ? fallback : it->second.back();
}

std::vector<std::string> ParsedArgs::all(const std::string& flag) const {
  auto it = values.find(flag);
  return it == values.end() ? std::vector<std::string>{} : it->second;
}

int64_t ParsedArgs::get_int(const std::string& flag, int64_t fallback) const {
  if (!has(flag)) return fallback;
  const std::string text = get(flag);
  try {
    size_t used = 0;
    const int64_t value = std::stoll(text, &used);
    if (used == text.size()) return value;
  } catch (const std::exception&) {
  }
  throw Error(flag + ": expected an integer, got '" + text + "'");
}

double ParsedArgs::get_double(const std::string& flag, double fallback) const {
  if (!has(flag)) return fallback;
  const std::string text = get(flag);
  try {
    size_t used = 0;
    const double value = std::stod(text, &used);
    if (used == text.size() && std::isfinite(value)) return value;
  } catch (const std::exception&) {
  }
  throw Error(flag + ": expected a finite number, got '" + text + "'");
}

ParsedArgs parse_args(const std::string& command, const std::vector<FlagSpec>& specs,
                      const std::vector<std::string>& args) {
  ParsedArgs parsed;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.rfind("--", 0) != 0) {
      parsed.positional.push_back(arg);
      continue;
    }
    std::string name = arg;
    std::string inline_value;
    const auto equals = arg.find('=');
    const bool has_inline = equals != std::string::npos;
    if (has_inline) {
      name = arg.substr(0, equals);
      inline_value = arg.substr(equals + 1);
    }
    auto spec = std::find_if(specs.begin(), specs.end(), [&](const FlagSpec& s) { return s.name == name; });
    if (spec == specs.end()) {
      throw Error("unknown option '" + name + "' (see sao " + command + " --help)");
    }
    if (!spec->repeatable && parsed.has(name)) throw Error(name + " given twice");
    std::string value;
    if (spec->takes_value) {
      if (has_inline) {
        value = inline_value;
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        throw Error(name + " needs a value");
      }
    } else if (has_inline) {
      throw Error(name + " takes no value");
    }
    parsed.values[name].push_back(value);
  }
  return parsed;
}

std::string flags_help(const std::vector<FlagSpec>& specs) {
  std::string text;
  for (const auto& spec : specs) {
    std::string left = "  " + spec.name + (spec.takes_value ? " VALUE" : "");
    left.resize(std::max<size_t>(left.size() + 2, 26), ' ');
    text += left + spec.help + "\n";
  }
  return text;
}

}  // namespace sao::cli
