// Process-wide malloc settings for a training process.
#pragma once

#include <string>

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

}  // namespace sao::base
