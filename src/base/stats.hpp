// Small descriptive statistics for reports (percentiles of latencies).
#pragma once

#include <vector>

namespace sao::base {

// Linear-interpolated percentile (0..100) of the finite values; NaN when none.
double percentile(std::vector<double> values, double percent);

}  // namespace sao::base
