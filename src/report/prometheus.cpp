// Prometheus text format; see prometheus.hpp.
#include "report/prometheus.hpp"

#include "base/error.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace sao::report {

std::string prometheus_metric_name(const std::string& raw) {
  std::string name;
  name.reserve(raw.size() + 1);
  for (char c : raw) {
    const bool valid =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == ':';
    name.push_back(valid ? c : '_');
  }
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) name.insert(name.begin(), '_');
  return name;
}

std::string prometheus_label_value(const std::string& raw) {
  std::string escaped;
  escaped.reserve(raw.size());
  for (char c : raw) {
    if (c == '\\') {
      escaped += "\\\\";
    } else if (c == '"') {
      escaped += "\\\"";
    } else if (c == '\n') {
      escaped += "\\n";
    } else {
      escaped.push_back(c);
    }
  }
  return escaped;
}

std::string prometheus_number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char text[64];
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    std::snprintf(text, sizeof(text), "%.0f", value);
  } else {
    // The shortest form that reads back as the same double.
    for (int digits = 15; digits <= 17; ++digits) {
      std::snprintf(text, sizeof(text), "%.*g", digits, value);
      if (std::strtod(text, nullptr) == value) break;
    }
  }
  return text;
}

void PrometheusWriter::family(const std::string& name, const std::string& type, const std::string& help) {
  if (type != "gauge" && type != "counter") throw Error("prometheus: unknown metric type '" + type + "'");
  current_ = prometheus_metric_name(name);
  std::string one_line_help;
  for (char c : help) one_line_help += (c == '\n') ? ' ' : c;
  text_ += "# HELP " + current_ + " " + one_line_help + "\n";
  text_ += "# TYPE " + current_ + " " + type + "\n";
}

void PrometheusWriter::sample(const Labels& labels, double value) {
  if (current_.empty()) throw Error("prometheus: a sample before any family");
  text_ += current_;
  if (!labels.empty()) {
    text_ += "{";
    bool first = true;
    for (const auto& [key, label] : labels) {
      if (!first) text_ += ",";
      first = false;
      text_ += prometheus_metric_name(key) + "=\"" + prometheus_label_value(label) + "\"";
    }
    text_ += "}";
  }
  text_ += " " + prometheus_number(value) + "\n";
}

}  // namespace sao::report
