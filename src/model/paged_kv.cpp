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
  // Grown by an eighth at least, so a run that fills its pool block by block
  // copies the storage O(log) times, and never holds more than 1.125x what
  // it needed.
  int64_t grown_blocks = std::max(needed_blocks, (storage_slots_ / block_size_) * 9 / 8);
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

namespace {

// The attention group of `members` (indices into `rows`, whose tokens start
// at `offsets`): the rows' key slots, padded to the longest, and which keys
// each of their tokens sees.
PagedGroup make_group(const std::vector<PagedRow>& rows, const std::vector<int64_t>& offsets,
                      const std::vector<size_t>& members, int64_t block_size, int64_t padding,
                      const torch::Device& device) {
  PagedGroup group;
  group.rows = static_cast<int64_t>(members.size());
  for (const auto r : members) {
    group.steps = std::max(group.steps, static_cast<int64_t>(rows[r].fresh.size()));
    group.keys_per_row = std::max(group.keys_per_row, rows[r].cached + static_cast<int64_t>(rows[r].fresh.size()));
  }
  const int64_t steps = group.steps, keys = group.keys_per_row;
  std::vector<int64_t> tokens, padded_index;
  auto read_slots = torch::full({group.rows * keys}, padding, torch::kInt64);
  auto last_key = torch::empty({group.rows, steps}, torch::kInt64);  // the last key each query may see
  auto* read = read_slots.data_ptr<int64_t>();
  auto* last = last_key.data_ptr<int64_t>();
  for (int64_t g = 0; g < group.rows; ++g) {
    const auto& row = rows[members[static_cast<size_t>(g)]];
    const auto fresh = static_cast<int64_t>(row.fresh.size());
    for (int64_t t = 0; t < fresh; ++t) {
      tokens.push_back(offsets[members[static_cast<size_t>(g)]] + t);
      padded_index.push_back(g * steps + t);
    }
    // A padded query sees what the row's last token sees (never an all-masked
    // row); its output is dropped.
    for (int64_t t = 0; t < steps; ++t) last[g * steps + t] = row.cached + std::min(t, fresh - 1);
    for (int64_t s = 0; s < row.cached + fresh; ++s) {
      read[g * keys + s] = (*row.blocks)[static_cast<size_t>(s / block_size)] * block_size + s % block_size;
    }
  }
  const auto key_index = torch::arange(keys, torch::kInt64).view({1, 1, keys});
  group.tokens = torch::tensor(tokens, torch::kInt64).to(device);
  group.padded_index = torch::tensor(padded_index, torch::kInt64).to(device);
  group.read_slots = read_slots.to(device);
  group.visible = (key_index <= last_key.unsqueeze(-1)).unsqueeze(1).to(device);  // [R, 1, T, S]
  return group;
}

}  // namespace

torch::Tensor forward_paged(Backbone& backbone, KVBlockPool& pool, const std::vector<PagedRow>& rows) {
  if (rows.empty()) throw Error("forward_paged: no rows");
  std::vector<int64_t> offsets;
  std::vector<size_t> decoding, extending;
  int64_t tokens = 0;
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
    offsets.push_back(tokens);
    tokens += fresh;
    (fresh == 1 ? decoding : extending).push_back(r);
  }
  const auto device = backbone->embed_tokens->weight.device();
  pool.prepare(device, backbone->embed_tokens->weight.scalar_type());
  const int64_t block_size = pool.block_size();
  auto input_ids = torch::empty({1, tokens}, torch::kInt64);
  auto positions = torch::empty({1, tokens}, torch::kInt64);
  auto write_slots = torch::empty({tokens}, torch::kInt64);
  auto* ids = input_ids.data_ptr<int64_t>();
  auto* position = positions.data_ptr<int64_t>();
  auto* write = write_slots.data_ptr<int64_t>();
  for (size_t r = 0; r < rows.size(); ++r) {
    const auto& row = rows[r];
    for (size_t t = 0; t < row.fresh.size(); ++t) {
      const int64_t at = offsets[r] + static_cast<int64_t>(t);
      const int64_t index = row.cached + static_cast<int64_t>(t);
      ids[at] = row.fresh[t];
      position[at] = index;
      write[at] = (*row.blocks)[static_cast<size_t>(index / block_size)] * block_size + index % block_size;
    }
  }
  PagedAttention call;
  call.keys = &pool.keys();
  call.values = &pool.values();
  call.positions = positions.to(device);
  call.write_slots = write_slots.to(device);
  for (const auto* members : {&decoding, &extending}) {
    if (!members->empty()) call.groups.push_back(make_group(rows, offsets, *members, block_size, pool.padding_slot(), device));
  }
  return backbone->forward_paged(input_ids.to(device), call)[0];  // [N, D]
}

}  // namespace sao::model
