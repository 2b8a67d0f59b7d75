// Monotonic time in whole units, for deadlines and durations (never for
// timestamps that leave the process).
#pragma once
#include <chrono>
#include <cstdint>

namespace sao::base {

inline int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace sao::base
