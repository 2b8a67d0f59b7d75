// The paged KV cache: one pool of fixed-size blocks per decode engine, a
// block list per sequence, blocks given back when a sequence ends. Memory
// follows the tokens alive, not rows x the longest row: a sequence holds
// ceil(tokens / block_size) blocks wherever they sit in the pool, and
// attention gathers them in order (transformer.hpp, PagedAttention).
//
// The pool's storage grows with the blocks in use, up to its capacity, and
// blocks are handed out lowest index first, so a run whose sequences never
// need the whole capacity never allocates it.
#pragma once

#include "model/transformer.hpp"

#include <torch/torch.h>

#include <cstdint>
#include <set>
#include <vector>

namespace sao::model {

class KVBlockPool {
 public:
  // capacity_tokens is rounded up to whole blocks. Throws sao::Error for a
  // capacity or block size below 1.
  KVBlockPool(const ModelConfig& config, int64_t capacity_tokens, int64_t block_size);

  int64_t block_size() const { return block_size_; }
  int64_t blocks_total() const { return blocks_total_; }
  int64_t blocks_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t blocks_in_use() const { return blocks_total_ - blocks_free(); }
  int64_t peak_blocks_in_use() const { return peak_in_use_; }
  int64_t capacity_tokens() const { return blocks_total_ * block_size_; }
  static int64_t blocks_for(int64_t tokens, int64_t block_size) { return (tokens + block_size - 1) / block_size; }
  int64_t blocks_for(int64_t tokens) const { return blocks_for(tokens, block_size_); }

  // Appends `count` free blocks to `blocks`; false (nothing taken) when fewer are free.
  bool take(int64_t count, std::vector<int64_t>& blocks);
  // Returns the blocks to the pool and clears the list.
  void give_back(std::vector<int64_t>& blocks);

  // Bytes one cached token takes in every layer (keys and values) at `dtype`.
  int64_t bytes_per_token(torch::ScalarType dtype = torch::kFloat32) const;
  // Bytes the storage holds now, and the most it ever held.
  int64_t storage_bytes() const;
  int64_t peak_storage_bytes() const { return peak_storage_bytes_; }

  // Makes the storage cover every block in use on `device` in `dtype`
  // (grown, keeping what is stored); called before each forward.
  void prepare(const torch::Device& device, torch::ScalarType dtype);
  int64_t padding_slot() const { return storage_slots_; }  // the storage's last slot: padded writes and reads
  std::vector<torch::Tensor>& keys() { return keys_; }
  std::vector<torch::Tensor>& values() { return values_; }

 private:
  int64_t layers_, kv_heads_, head_dim_;
  int64_t block_size_, blocks_total_;
  std::set<int64_t> free_;  // ordered: the lowest free block goes first
  int64_t peak_in_use_ = 0;
  int64_t storage_slots_ = 0;  // slots of real blocks the storage covers (plus one padding slot)
  int64_t peak_storage_bytes_ = 0;
  std::vector<torch::Tensor> keys_, values_;  // per layer [storage_slots + 1, kv_heads, head_dim]
};

// One row of a paged forward: `fresh` tokens go after the `cached` ones
// already in the row's blocks.
struct PagedRow {
  const std::vector<int64_t>* blocks = nullptr;
  int64_t cached = 0;
  std::vector<int64_t> fresh;  // at least one token
};

// Runs every row's fresh tokens through the backbone in one call, writing
// their keys and values into the row's blocks (which must have room:
// sao::Error otherwise) at rotary positions cached, cached + 1, ... Returns
// hidden [N, D] for the N fresh tokens in row order: row r's at offsets
// fresh(0) + ... + fresh(r - 1) onwards.
torch::Tensor forward_paged(Backbone& backbone, KVBlockPool& pool, const std::vector<PagedRow>& rows);

}  // namespace sao::model
