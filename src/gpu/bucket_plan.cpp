// Bucket planning for collective weight broadcasts; see bucket_plan.hpp.
#include "gpu/bucket_plan.hpp"

#include "base/error.hpp"

#include <algorithm>
#include <string>

namespace sao::gpu {

std::vector<Bucket> plan_buckets(const std::vector<model::PackedTensor>& index, uint64_t total_bytes,
                                 uint64_t max_bucket_bytes) {
  if (max_bucket_bytes == 0) throw Error("weight buckets: the bucket size must be > 0 bytes");
  uint64_t previous_end = 0;
  for (const auto& entry : index) {
    if (entry.offset < previous_end || entry.offset > total_bytes || entry.size > total_bytes - entry.offset) {
      throw Error("weight buckets: tensor '" + entry.name + "' (bytes " + std::to_string(entry.offset) + "+" +
                  std::to_string(entry.size) + ") is out of order or outside the " + std::to_string(total_bytes) +
                  "-byte buffer");
    }
    previous_end = entry.offset + entry.size;
  }
  std::vector<Bucket> buckets;
  uint64_t start = 0;     // first byte of the open bucket
  uint64_t open_end = 0;  // end of the last tensor in the open bucket
  const auto cut_until = [&](uint64_t end) {
    while (end - start > max_bucket_bytes) {
      buckets.push_back({start, max_bucket_bytes});
      start += max_bucket_bytes;
    }
  };
  for (const auto& entry : index) {
    const uint64_t end = entry.offset + entry.size;  // the tensor and the gap before it
    if (end - start > max_bucket_bytes) {
      if (open_end > start) {
        buckets.push_back({start, open_end - start});
        start = open_end;
      }
      cut_until(end);  // a tensor larger than the bound gets buckets of its own
    }
    open_end = end;
  }
  cut_until(total_bytes);
  if (total_bytes > start) buckets.push_back({start, total_bytes - start});
  return buckets;
}

std::vector<BucketPiece> pieces_in(const std::vector<model::PackedTensor>& index, const Bucket& bucket) {
  std::vector<BucketPiece> pieces;
  const uint64_t bucket_end = bucket.offset + bucket.size;
  for (size_t i = 0; i < index.size(); ++i) {
    const auto& entry = index[i];
    const uint64_t first = std::max(entry.offset, bucket.offset);
    const uint64_t last = std::min(entry.offset + entry.size, bucket_end);
    if (first >= last) continue;
    pieces.push_back({i, first - entry.offset, first - bucket.offset, last - first});
  }
  return pieces;
}

}  // namespace sao::gpu
