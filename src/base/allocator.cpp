// See allocator.hpp for why.
#include "base/allocator.hpp"

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace sao::base {

namespace {
// glibc's maximum for M_MMAP_THRESHOLD on 64-bit, which
// keep_freed_memory_for_reuse sets: a block this large is always a fresh
// mapping, untouched until it is written.
constexpr int kFreshMappingBytes = 32 << 20;
}  // namespace

std::string keep_freed_memory_for_reuse() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr) {
    return "malloc: left to GLIBC_TUNABLES";
  }
  constexpr int kMmapThreshold = kFreshMappingBytes;
  constexpr int kTrimThreshold = 1 << 30;
  if (mallopt(M_MMAP_THRESHOLD, kMmapThreshold) != 1 || mallopt(M_TRIM_THRESHOLD, kTrimThreshold) != 1) {
    return "malloc: glibc refused the settings; defaults kept";
  }
  return "malloc: freed blocks up to 32 MiB reused from the heap, trimmed past 1 GiB";
}

std::vector<char> make_bulk_buffer(size_t bytes) {
  std::vector<char> buffer;
  buffer.reserve(bytes);
  if (bytes >= static_cast<size_t>(kFreshMappingBytes)) {
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto start = reinterpret_cast<uintptr_t>(buffer.data());
    const uintptr_t begin = (start + page - 1) / page * page;
    const uintptr_t end = (start + bytes) / page * page;
    // Only a hint: where it fails (THP off, old kernel) nothing changes.
    if (end > begin) (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  }
  buffer.resize(bytes);
  return buffer;
}

}  // namespace sao::base
