// SAO_FAILPOINT parsing and the kill; see failpoint.hpp.
#include "base/failpoint.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>

namespace sao::base {

namespace {
struct Target {
  std::string name;
  long hit = 1;  // which pass kills
};

const Target& target() {
  static const Target parsed = [] {
    Target t;
    const char* value = std::getenv("SAO_FAILPOINT");
    if (value == nullptr) return t;
    t.name = value;
    const auto at = t.name.rfind('@');
    if (at != std::string::npos) {
      t.hit = std::strtol(t.name.c_str() + at + 1, nullptr, 10);
      t.name.resize(at);
    }
    return t;
  }();
  return parsed;
}

std::atomic<long> passes{0};
}  // namespace

void failpoint(const std::string& name) {
  const auto& t = target();
  if (t.name.empty() || name != t.name) return;
  if (passes.fetch_add(1) + 1 == t.hit) ::kill(::getpid(), SIGKILL);
}

}  // namespace sao::base
