// Simulated environment latency: the wall time that a tool call, a sandbox or
// a remote service adds to each reset and step of an agentic environment.
// Why: on the trainer's own CPU there is little for asynchronous RL to
// overlap; agentic environments spend their time waiting, and that is where
// the asynchronous design pays (bench/async_latency.sh). The env actor holds
// each reply for a drawn time without holding its thread, so a delay costs
// no CPU and the delays of different episodes overlap, as independent
// sandboxes do.
#pragma once

#include <cstdint>
#include <random>
#include <string>

namespace sao::env {

// Ten minutes: a delay beyond any request deadline the runtime allows.
inline constexpr double kMaxDelayMs = 600000.0;

struct LatencyModel {
  // "none", "fixed" (always mean_ms), "uniform" (uniform in [0, 2 mean_ms])
  // or "lognormal" (long-tailed: log of the delay normal with sd `sigma`,
  // scaled so the mean before the cap is mean_ms; at sigma 1 the median is
  // 0.61 mean and the 99th percentile 6.2 mean).
  std::string distribution = "none";
  double mean_ms = 0.0;
  double sigma = 1.0;
  // No delay above this (a tool call's timeout); 0 means 20 x mean_ms.
  double max_ms = 0.0;

  // Throws sao::Error naming `where`.KEY, the allowed values and the value.
  void validate(const std::string& where) const;
  bool enabled() const { return distribution != "none" && mean_ms > 0.0; }
  double cap_ms() const { return max_ms > 0.0 ? max_ms : 20.0 * mean_ms; }
  // One delay in milliseconds, from the raw generator (portable across
  // standard libraries, like the tasks' sampling); 0 when not enabled.
  double draw_ms(std::mt19937_64& rng) const;
};

}  // namespace sao::env
