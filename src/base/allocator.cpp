// See allocator.hpp for why.
#include "base/allocator.hpp"

#include <malloc.h>

#include <cstdlib>
#include <cstring>

namespace sao::base {

std::string keep_freed_memory_for_reuse() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr) {
    return "malloc: left to GLIBC_TUNABLES";
  }
  constexpr int kMmapThreshold = 32 << 20;  // glibc's maximum for M_MMAP_THRESHOLD on 64-bit
  constexpr int kTrimThreshold = 1 << 30;
  if (mallopt(M_MMAP_THRESHOLD, kMmapThreshold) != 1 || mallopt(M_TRIM_THRESHOLD, kTrimThreshold) != 1) {
    return "malloc: glibc refused the settings; defaults kept";
  }
  return "malloc: freed blocks up to 32 MiB reused from the heap, trimmed past 1 GiB";
}

}  // namespace sao::base
