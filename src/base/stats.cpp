// Percentiles; see stats.hpp.
#include "base/stats.hpp"

#include <algorithm>
#include <cmath>

namespace sao::base {

double percentile(std::vector<double> values, double percent) {
  values.erase(std::remove_if(values.begin(), values.end(), [](double v) { return !std::isfinite(v); }), values.end());
  if (values.empty()) return std::nan("");
  std::sort(values.begin(), values.end());
  const double rank = std::clamp(percent, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  const auto lower = static_cast<size_t>(std::floor(rank));
  const auto upper = std::min(values.size() - 1, lower + 1);
  return values[lower] + (rank - static_cast<double>(lower)) * (values[upper] - values[lower]);
}

}  // namespace sao::base
