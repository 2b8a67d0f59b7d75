// bf16 images and their deltas; see delta.hpp.
#include "weights/delta.hpp"

#include "base/error.hpp"

#include <xxhash.h>

#include <cstring>

namespace sao::weights {

namespace {

void put_varint(std::vector<uint8_t>& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<uint8_t>(value | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<uint8_t>(value));
}

// False when the payload ends inside the varint or it is over 64 bits.
bool get_varint(const std::vector<uint8_t>& in, size_t& at, uint64_t& value) {
  value = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (at >= in.size()) return false;
    const uint8_t byte = in[at++];
    value |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

uint64_t zigzag(int32_t value) {
  const auto wide = static_cast<int64_t>(value);
  return (static_cast<uint64_t>(wide) << 1) ^ static_cast<uint64_t>(wide >> 63);
}

int32_t unzigzag(uint64_t value) {
  return static_cast<int32_t>(static_cast<int64_t>(value >> 1) ^ -static_cast<int64_t>(value & 1));
}

// One change: a single byte 0b0SGGGGGG for a step of +1 (S=0) or -1 (S=1)
// at a gap below 64, the common case at RL learning rates; otherwise 0x80
// followed by the gap and the zigzagged change as varints.
constexpr uint8_t kLongChange = 0x80;
constexpr uint8_t kMinusOne = 0x40;
constexpr uint64_t kShortGaps = 64;

void put_change(std::vector<uint8_t>& out, uint64_t gap, int32_t change) {
  if (gap < kShortGaps && (change == 1 || change == -1)) {
    out.push_back(static_cast<uint8_t>(gap | (change < 0 ? kMinusOne : 0)));
    return;
  }
  out.push_back(kLongChange);
  put_varint(out, gap);
  put_varint(out, zigzag(change));
}

// False when the payload ends inside the change or a long form's marker
// byte has other bits set.
bool get_change(const std::vector<uint8_t>& in, size_t& at, uint64_t& gap, int32_t& change) {
  if (at >= in.size()) return false;
  const uint8_t head = in[at++];
  if ((head & kLongChange) == 0) {
    gap = head & (kShortGaps - 1);
    change = (head & kMinusOne) != 0 ? -1 : 1;
    return true;
  }
  uint64_t zigzagged = 0;
  if (head != kLongChange || !get_varint(in, at, gap) || !get_varint(in, at, zigzagged)) return false;
  if (zigzagged > 0x1ffffu) return false;  // beyond any change of a 16-bit pattern
  change = unzigzag(zigzagged);
  return true;
}

}  // namespace

Bf16Image bf16_image(const model::PackedTensors& packed, int64_t version) {
  Bf16Image image;
  image.version = version;
  uint64_t total = 0;
  for (const auto& entry : packed.index) {
    if (entry.offset > packed.bytes.size() || entry.size > packed.bytes.size() - entry.offset) {
      throw Error("bf16 image: tensor '" + entry.name + "' lies outside the buffer");
    }
    if (entry.dtype == "F32") {
      total += entry.size / 4;
    } else if (entry.dtype == "BF16") {
      total += entry.size / 2;
    } else {
      throw Error("bf16 image: tensor '" + entry.name + "' is " + entry.dtype +
                  "; a bf16 replica holds F32 and BF16 tensors only");
    }
  }
  image.values.resize(static_cast<size_t>(total));
  size_t at = 0;
  for (const auto& entry : packed.index) {
    const char* bytes = packed.bytes.data() + entry.offset;
    if (entry.dtype == "F32") {
      // torch's own conversion, as the replica's model->to(kBFloat16) rounds.
      const auto count = static_cast<int64_t>(entry.size / 4);
      auto source = torch::from_blob(const_cast<char*>(bytes), {count}, torch::kFloat32);
      auto target = torch::from_blob(image.values.data() + at, {count}, torch::kBFloat16);
      target.copy_(source);
      at += static_cast<size_t>(count);
    } else {
      std::memcpy(image.values.data() + at, bytes, static_cast<size_t>(entry.size));
      at += static_cast<size_t>(entry.size / 2);
    }
  }
  return image;
}

uint64_t checksum_of(const Bf16Image& image) {
  return XXH3_64bits(image.values.data(), image.values.size() * sizeof(uint16_t));
}

Delta encode_delta(const Bf16Image& base, const Bf16Image& next) {
  if (base.values.size() != next.values.size()) {
    throw Error("delta: v" + std::to_string(base.version) + " has " + std::to_string(base.values.size()) +
                " elements, v" + std::to_string(next.version) + " " + std::to_string(next.values.size()));
  }
  Delta delta;
  delta.base_version = base.version;
  delta.version = next.version;
  delta.elements = next.values.size();
  delta.checksum = checksum_of(next);
  uint64_t previous = 0;  // one past the last changed position
  for (size_t i = 0; i < next.values.size(); ++i) {
    if (next.values[i] == base.values[i]) continue;
    put_change(delta.payload, i - previous,
               static_cast<int32_t>(next.values[i]) - static_cast<int32_t>(base.values[i]));
    previous = i + 1;
    ++delta.changed;
  }
  return delta;
}

void apply_delta(Bf16Image& image, const Delta& delta) {
  const std::string where = "delta v" + std::to_string(delta.base_version) + " -> v" + std::to_string(delta.version);
  if (image.version != delta.base_version) {
    throw Error(where + ": the receiver holds v" + std::to_string(image.version));
  }
  if (image.values.size() != delta.elements) {
    throw Error(where + ": for " + std::to_string(delta.elements) + " elements, the receiver holds " +
                std::to_string(image.values.size()));
  }
  size_t at = 0;
  uint64_t position = 0;
  for (uint64_t k = 0; k < delta.changed; ++k) {
    uint64_t gap = 0;
    int32_t change = 0;
    if (!get_change(delta.payload, at, gap, change)) {
      throw Error(where + ": the payload ends inside change " + std::to_string(k) + " or it is malformed");
    }
    if (gap >= delta.elements - position) throw Error(where + ": change " + std::to_string(k) + " lies past the end");
    position += gap;
    const int32_t value = static_cast<int32_t>(image.values[position]) + change;
    if (value < 0 || value > 0xffff) throw Error(where + ": change " + std::to_string(k) + " is out of range");
    image.values[position] = static_cast<uint16_t>(value);
    ++position;
  }
  if (at != delta.payload.size()) throw Error(where + ": the payload has bytes past its last change");
  image.version = delta.version;
  if (checksum_of(image) != delta.checksum) {
    image.version = -1;  // neither version: a full one must replace it
    throw Error(where + ": the result does not match the version's checksum");
  }
}

DeltaHistory::DeltaHistory(int64_t anchor_every, size_t versions_kept)
    : anchor_every_(anchor_every), versions_kept_(versions_kept) {
  if (anchor_every < 1) throw Error("delta: anchor_every must be >= 1, got " + std::to_string(anchor_every));
  if (versions_kept < 2) throw Error("delta: versions_kept must be >= 2, got " + std::to_string(versions_kept));
}

void DeltaHistory::add(Bf16Image image) {
  if (!images_.empty() && image.version <= images_.back().version) {
    throw Error("delta: v" + std::to_string(image.version) + " is not newer than v" +
                std::to_string(images_.back().version));
  }
  images_.push_back(std::move(image));
  while (images_.size() > versions_kept_) images_.pop_front();
}

const Bf16Image* DeltaHistory::newest() const {
  return images_.empty() ? nullptr : &images_.back();
}

bool DeltaHistory::anchor_due(int64_t version) const {
  return version % anchor_every_ == 0;
}

const Bf16Image* DeltaHistory::base_for(int64_t receiver_version) const {
  if (images_.empty() || anchor_due(images_.back().version)) return nullptr;
  for (const auto& image : images_) {
    if (image.version == receiver_version && &image != &images_.back()) return &image;
  }
  return nullptr;
}

bool DeltaHistory::has_delta_for(int64_t receiver_version) const {
  return base_for(receiver_version) != nullptr;
}

std::optional<Delta> DeltaHistory::delta_for(int64_t receiver_version) const {
  const auto* base = base_for(receiver_version);
  if (base == nullptr) return std::nullopt;
  return encode_delta(*base, images_.back());
}

}  // namespace sao::weights
