// How a packed weight buffer is cut into size-bounded buckets for a
// collective broadcast (NCCL), and which bytes of which tensor each bucket
// carries. Why buckets: a receiver stages one bucket at a time, so its extra
// GPU memory is one bucket, not a second copy of the model, and the copy of
// bucket i into the parameters overlaps the transfer of bucket i + 1.
// Pure arithmetic on the index: no CUDA, tested on any machine.
#pragma once

#include "model/tensor_blob.hpp"

#include <cstdint>
#include <vector>

namespace sao::gpu {

// Bytes [offset, offset + size) of the packed buffer.
struct Bucket {
  uint64_t offset = 0;
  uint64_t size = 0;
};

// Cuts [0, total_bytes) into consecutive buckets of at most max_bucket_bytes
// that start and end on tensor boundaries where they can: tensors are added
// to a bucket while they fit; a tensor larger than the bound gets buckets of
// its own, cut every max_bucket_bytes. Alignment gaps between tensors go
// with the following tensor. Every byte of [0, total_bytes) is in exactly
// one bucket. Throws sao::Error for max_bucket_bytes 0 or an index that
// does not lie in order inside total_bytes.
std::vector<Bucket> plan_buckets(const std::vector<model::PackedTensor>& index, uint64_t total_bytes,
                                 uint64_t max_bucket_bytes);

// One contiguous piece of one tensor inside a bucket.
struct BucketPiece {
  size_t tensor = 0;           // position in the index
  uint64_t tensor_offset = 0;  // first byte within the tensor
  uint64_t bucket_offset = 0;  // first byte within the bucket
  uint64_t size = 0;           // bytes
};

// The pieces of tensors that `bucket` holds, in index order (gaps between
// tensors hold no piece).
std::vector<BucketPiece> pieces_in(const std::vector<model::PackedTensor>& index, const Bucket& bucket);

}  // namespace sao::gpu
