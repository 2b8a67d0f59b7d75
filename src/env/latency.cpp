// Latency draws; see latency.hpp.
#include "env/latency.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "base/error.hpp"

namespace sao::env {
namespace {

// Uniform in (0, 1): 53 random bits, never 0 (the log below needs that).
double open_unit(std::mt19937_64& rng) {
  return (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53;
}

std::string text(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

}  // namespace

void LatencyModel::validate(const std::string& where) const {
  if (distribution != "none" && distribution != "fixed" && distribution != "uniform" && distribution != "lognormal") {
    throw Error(where + ".latency: must be \"none\", \"fixed\", \"uniform\" or \"lognormal\", got \"" + distribution +
                "\"");
  }
  if (!(mean_ms >= 0.0 && mean_ms <= kMaxDelayMs)) {
    throw Error(where + ".latency_ms: must be in [0, " + text(kMaxDelayMs) + "], got " + text(mean_ms));
  }
  if (!(sigma > 0.0 && sigma <= 4.0)) throw Error(where + ".latency_sigma: must be in (0, 4], got " + text(sigma));
  if (!(max_ms >= 0.0 && max_ms <= kMaxDelayMs)) {
    throw Error(where + ".latency_max_ms: must be in [0, " + text(kMaxDelayMs) + "] (0: 20 x latency_ms), got " +
                text(max_ms));
  }
  if (max_ms > 0.0 && max_ms < mean_ms) {
    throw Error(where + ".latency_max_ms: " + text(max_ms) + " is below latency_ms " + text(mean_ms) +
                ": the cap would change the mean");
  }
  if (distribution != "none" && mean_ms == 0.0) {
    throw Error(where + ".latency_ms: must be > 0 with latency \"" + distribution + "\"");
  }
}

double LatencyModel::draw_ms(std::mt19937_64& rng) const {
  if (!enabled()) return 0.0;
  double delay = mean_ms;
  if (distribution == "uniform") {
    delay = 2.0 * mean_ms * open_unit(rng);
  } else if (distribution == "lognormal") {
    // Box-Muller from two raw draws; mu puts the mean of exp(mu + sigma Z) at mean_ms.
    const double normal = std::sqrt(-2.0 * std::log(open_unit(rng))) * std::cos(2.0 * M_PI * open_unit(rng));
    const double mu = std::log(mean_ms) - 0.5 * sigma * sigma;
    delay = std::exp(mu + sigma * normal);
  }
  return std::min(delay, cap_ms());
}

}  // namespace sao::env
