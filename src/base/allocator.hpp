// Process-wide malloc settings for a training process.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace sao::base {

// glibc returns freed blocks of over 128 KiB to the kernel (mmap'd chunks are
// unmapped, the heap's top is trimmed) and on the next allocation faults the
// pages in again, one by one, zeroed. A learner step allocates and frees the
// same activation-sized tensors hundreds of times, so with the defaults a
// tenth or more of a step went to page faults (perf on bench_learner). This
// keeps freed memory in the heap for reuse instead: blocks up to 32 MiB (the
// most glibc allows) come from the heap, and the heap is trimmed only past
// 1 GiB free at its top. PyTorch's CUDA caching allocator makes the same
// trade on a GPU: the process's resident memory stays near its peak.
//
// Does nothing when GLIBC_TUNABLES already sets a glibc.malloc option (the
// user's choice wins). Returns what was done, for `sao doctor`.
std::string keep_freed_memory_for_reuse();

// A zero-filled buffer of `bytes` for one bulk write (packed weights, a
// received weight message). Blocks past glibc's mmap threshold are fresh
// mappings that fault in page by page; a page fault here costs ~10 us, so a
// 400 MB buffer took ~1 s of faults. Such a buffer is advised to use
// transparent huge pages (madvise, before its first touch): 2 MiB per fault,
// ~200 faults instead of ~100,000. Where THP is off the advice is ignored
// and the buffer is the same, only slower to fill.
std::vector<char> make_bulk_buffer(size_t bytes);

}  // namespace sao::base
