// Typed metrics lines; see metrics_line.hpp.
#include "report/metrics_line.hpp"

#include "base/error.hpp"

#include <cmath>

namespace sao::report {

MetricsLine metrics_line_from_json(const nlohmann::json& line, const std::string& where) {
  if (!line.is_object()) throw Error(where + ": a metrics line must be a JSON object");
  MetricsLine result;
  for (const auto& item : line.items()) {
    const auto& value = item.value();
    if (value.is_null()) {
      result.numbers[item.key()] = std::nan("");
    } else if (value.is_boolean()) {
      result.flags[item.key()] = value.get<bool>();
    } else if (value.is_number()) {
      result.numbers[item.key()] = value.get<double>();
    } else if (value.is_string()) {
      result.texts[item.key()] = value.get<std::string>();
    } else {
      throw Error(where + ": key '" + item.key() + "' holds " + value.type_name() +
                  "; a metrics line holds numbers, strings, booleans and nulls only");
    }
  }
  return result;
}

nlohmann::json number_to_json(double value) {
  if (!std::isfinite(value)) return nullptr;
  // Counts and steps come back as integers, as the sink wrote them.
  constexpr double kExactIntegers = 9007199254740992.0;  // 2^53
  if (value == std::floor(value) && std::fabs(value) < kExactIntegers) return static_cast<int64_t>(value);
  return value;
}

nlohmann::json to_json(const MetricsLine& line) {
  nlohmann::json result = nlohmann::json::object();
  for (const auto& [key, value] : line.numbers) result[key] = number_to_json(value);
  for (const auto& [key, value] : line.texts) result[key] = value;
  for (const auto& [key, value] : line.flags) result[key] = value;
  return result;
}

nlohmann::json to_json(const MetricsHistory& history) {
  auto lines = [](const std::vector<MetricsLine>& source) {
    nlohmann::json array = nlohmann::json::array();
    for (const auto& line : source) array.push_back(to_json(line));
    return array;
  };
  nlohmann::json knobs = nlohmann::json::object();
  for (const auto& [key, value] : history.knobs) knobs[key] = number_to_json(value);
  auto summary = to_json(history.summary);
  summary["evals"] = lines(history.evals);
  return {{"steps", lines(history.steps)},
          {"evals", lines(history.evals)},
          {"events", lines(history.events)},
          {"knobs", knobs},
          {"latest", history.has_latest ? to_json(history.latest) : nlohmann::json(nullptr)},
          {"summary", summary}};
}

}  // namespace sao::report
