// The block pool and the paged forward; see paged_kv.hpp.
#include "model/paged_kv.hpp"

#include "base/error.hpp"

#include <algorithm>

namespace sao::model {

KVBlockPool::KVBlockPool(const ModelConfig& config, int64_t capacity_tokens, int64_t block_size)
    : layers_(config.num_hidden_layers),
      kv_heads_(config.num_key_value_heads),
      head_dim_(config.head_dim()),
      block_size_(block_size) {
  if (block_size < 1) throw Error("KV cache: block size must be >= 1 token, got " + std::to_string(block_size));
  if (capacity_tokens < 1) throw Error("KV cache: capacity must be >= 1 token, got " + std::to_string(capacity_tokens));
  blocks_total_ = blocks_for(capacity_tokens);
  for (int64_t block = 0; block < blocks_total_; ++block) free_.insert(free_.end(), block);
  keys_.resize(static_cast<size_t>(layers_));
  values_.resize(static_cast<size_t>(layers_));
}

bool KVBlockPool::take(int64_t count, std::vector<int64_t>& blocks) {
  if (count < 0 || count > blocks_free()) return false;
  for (int64_t i = 0; i < count; ++i) {
    blocks.push_back(*free_.begin());
    free_.erase(free_.begin());
  }
  peak_in_use_ = std::max(peak_in_use_, blocks_in_use());
  return true;
}

void KVBlockPool::give_back(std::vector<int64_t>& blocks) {
  for (const auto block : blocks) {
    if (block < 0 || block >= blocks_total_ || !free_.insert(block).second) {
      throw Error("KV cache: block " + std::to_string(block) + " given back twice or never taken");
    }
  }
  blocks.clear();
}

int64_t KVBlockPool::bytes_per_token(torch::ScalarType dtype) const {
  return 2 * layers_ * kv_heads_ * head_dim_ * static_cast<int64_t>(c10::elementSize(dtype));
}

int64_t KVBlockPool::storage_bytes() const {
  if (keys_.empty() || !keys_.front().defined()) return 0;
  return (storage_slots_ + 1) * bytes_per_token(keys_.front().scalar_type());
}

void KVBlockPool::prepare(const torch::Device& device, torch::ScalarType dtype) {
  // The highest block in use bounds the slots the storage must cover.
  int64_t needed_blocks = 0;
  if (blocks_in_use() > 0) {
    int64_t highest_free_run = blocks_total_;  // blocks past the last one in use are all free
    for (auto it = free_.rbegin(); it != free_.rend() && *it == highest_free_run - 1; ++it) --highest_free_run;
    needed_blocks = highest_free_run;
  }
  const bool moved = keys_.front().defined() &&
                     (keys_.front().device() != device || keys_.front().scalar_type() != dtype);
  if (needed_blocks * block_size_ <= storage_slots_ && keys_.front().defined() && !moved) return;
  // Grown by a quarter at least, so a run that fills its pool token by token
  // copies the storage O(log) times, never more than 1.25x what it needs.
  int64_t grown_blocks = std::max(needed_blocks, (storage_slots_ / block_size_) * 5 / 4);
  grown_blocks = std::min(std::max<int64_t>(grown_blocks, 1), blocks_total_);
  const int64_t slots = moved ? std::max(storage_slots_, grown_blocks * block_size_) : grown_blocks * block_size_;
  const auto options = torch::TensorOptions().dtype(dtype).device(device);
  for (size_t layer = 0; layer < keys_.size(); ++layer) {
    for (auto* stored : {&keys_[layer], &values_[layer]}) {
      auto fresh = torch::zeros({slots + 1, kv_heads_, head_dim_}, options);
      if (stored->defined() && storage_slots_ > 0) {
        fresh.narrow(0, 0, storage_slots_).copy_(stored->narrow(0, 0, storage_slots_));
      }
      *stored = fresh;
    }
  }
  storage_slots_ = slots;
  peak_storage_bytes_ = std::max(peak_storage_bytes_, storage_bytes());
}

torch::Tensor forward_paged(Backbone& backbone, KVBlockPool& pool, const std::vector<PagedRow>& rows) {
  if (rows.empty()) throw Error("forward_paged: no rows");
  const auto rows_count = static_cast<int64_t>(rows.size());
  int64_t steps = 0, keys = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    const auto& row = rows[r];
    const auto fresh = static_cast<int64_t>(row.fresh.size());
    if (row.blocks == nullptr || fresh < 1 || row.cached < 0) {
      throw Error("forward_paged: row " + std::to_string(r) + " has no blocks or no new token");
    }
    const int64_t room = static_cast<int64_t>(row.blocks->size()) * pool.block_size();
    if (row.cached + fresh > room) {
      throw Error("forward_paged: row " + std::to_string(r) + " needs " + std::to_string(row.cached + fresh) +
                  " cached tokens but its blocks hold " + std::to_string(room));
    }
    steps = std::max(steps, fresh);
    keys = std::max(keys, row.cached + fresh);
  }
  const auto device = backbone->embed_tokens->weight.device();
  pool.prepare(device, backbone->embed_tokens->weight.scalar_type());
  const int64_t padding = pool.padding_slot();
  const int64_t block_size = pool.block_size();
  auto input_ids = torch::zeros({rows_count, steps}, torch::kInt64);
  auto positions = torch::empty({rows_count, steps}, torch::kInt64);
  auto write_slots = torch::full({rows_count * steps}, padding, torch::kInt64);
  auto read_slots = torch::full({rows_count * keys}, padding, torch::kInt64);
  auto last_key = torch::empty({rows_count, steps}, torch::kInt64);  // the last key each query may see
  auto* ids = input_ids.data_ptr<int64_t>();
  auto* position = positions.data_ptr<int64_t>();
  auto* write = write_slots.data_ptr<int64_t>();
  auto* read = read_slots.data_ptr<int64_t>();
  auto* last = last_key.data_ptr<int64_t>();
  for (int64_t r = 0; r < rows_count; ++r) {
    const auto& row = rows[static_cast<size_t>(r)];
    const auto& blocks = *row.blocks;
    const auto fresh = static_cast<int64_t>(row.fresh.size());
    const auto slot_of = [&](int64_t index) {
      return blocks[static_cast<size_t>(index / block_size)] * block_size + index % block_size;
    };
    for (int64_t t = 0; t < steps; ++t) {
      // A padded query repeats the row's last real token's position and sees
      // what it sees (never an all-masked row); its output is discarded.
      const int64_t real = std::min(t, fresh - 1);
      position[r * steps + t] = row.cached + real;
      last[r * steps + t] = row.cached + real;
      if (t < fresh) {
        ids[r * steps + t] = row.fresh[static_cast<size_t>(t)];
        write[r * steps + t] = slot_of(row.cached + t);
      }
    }
    for (int64_t s = 0; s < row.cached + fresh; ++s) read[r * keys + s] = slot_of(s);
  }
  auto key_index = torch::arange(keys, torch::kInt64).view({1, 1, keys});
  PagedAttention call;
  call.keys = &pool.keys();
  call.values = &pool.values();
  call.positions = positions.to(device);
  call.write_slots = write_slots.to(device);
  call.read_slots = read_slots.to(device);
  call.visible = (key_index <= last_key.unsqueeze(-1)).unsqueeze(1).to(device);  // [R, 1, T, S]
  call.keys_per_row = keys;
  return backbone->forward_paged(input_ids.to(device), call);
}

}  // namespace sao::model
