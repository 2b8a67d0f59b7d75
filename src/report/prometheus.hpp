// Prometheus text exposition format (version 0.0.4): metric families with
// HELP/TYPE lines and one sample per line, so an existing Prometheus or
// Grafana setup can scrape a run. Names are made valid here; label values
// are escaped; NaN and infinities are written the way Prometheus reads them.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace sao::report {

// Maps any string onto [a-zA-Z_:][a-zA-Z0-9_:]* (other characters become
// '_', a leading digit gets a '_' in front).
std::string prometheus_metric_name(const std::string& raw);
// Escapes backslash, double quote and newline as the format requires.
std::string prometheus_label_value(const std::string& raw);
// 1.5 -> "1.5", NaN -> "NaN", inf -> "+Inf"; integers without exponent.
std::string prometheus_number(double value);

class PrometheusWriter {
 public:
  using Labels = std::map<std::string, std::string>;
  // Starts a family (HELP and TYPE once); `type` is gauge or counter.
  void family(const std::string& name, const std::string& type, const std::string& help);
  // A sample of the family last started.
  void sample(const Labels& labels, double value);
  const std::string& text() const { return text_; }

 private:
  std::string text_;
  std::string current_;
};

}  // namespace sao::report
