// Delta versions for a low-precision replica. A rollout that runs the
// policy in bf16 needs, for a new version, only the elements whose bf16
// value changed since the version it holds: at RL learning rates most fp32
// updates are smaller than half a bf16 step, so most bf16 values stay put.
// A delta is lossless by construction: it carries the checksum of the image
// it makes, and applying it checks that.
//
// Encoding: for each changed element, the gap from the previous changed one
// and the change of its bf16 bit pattern. Most changes are one bf16 step up
// or down at a short gap: those take one byte; any other takes a marker
// byte and the gap and change as LEB128 varints. So a changed element costs
// about half of what the full image spends on every element.
#pragma once

#include "model/tensor_blob.hpp"

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

namespace sao::weights {

// One version as a bf16 replica holds it: every tensor of the pack in bf16,
// in index order (F32 converted by torch, as the replica's
// model->to(kBFloat16) rounds it: to nearest even; BF16 as it is).
struct Bf16Image {
  int64_t version = -1;
  std::vector<uint16_t> values;
};
// Throws sao::Error naming a tensor of another dtype.
Bf16Image bf16_image(const model::PackedTensors& packed, int64_t version);
uint64_t checksum_of(const Bf16Image& image);

struct Delta {
  int64_t base_version = 0;
  int64_t version = 0;
  uint64_t elements = 0;  // of the whole image; a base of another size is refused
  uint64_t changed = 0;   // elements that differ from the base
  std::vector<uint8_t> payload;
  uint64_t checksum = 0;  // of the image the delta makes
  // What travels: the payload and the fields above.
  uint64_t wire_bytes() const { return payload.size() + 5 * sizeof(uint64_t); }
};

// Throws sao::Error when the images differ in size.
Delta encode_delta(const Bf16Image& base, const Bf16Image& next);
// Applies `delta` to `image` (which must be its base). Throws sao::Error
// naming what is wrong: another base version or size, a payload that runs
// past the image or ends early, or a result whose checksum is not the
// delta's - the image then holds neither version and must be replaced by a
// full one.
void apply_delta(Bf16Image& image, const Delta& delta);

// The sender's side: the images of the newest versions, and when a receiver
// gets a delta and when the full version (an anchor).
class DeltaHistory {
 public:
  // anchor_every: every version divisible by it goes out in full to every
  // receiver (a bound on how long an error could live); versions_kept: how
  // far behind a receiver may be and still get a delta.
  DeltaHistory(int64_t anchor_every, size_t versions_kept);
  void add(Bf16Image image);  // the newest version
  const Bf16Image* newest() const;
  // The delta that takes a receiver holding `receiver_version` to the newest
  // version; nullopt when it must get the full version: an anchor is due,
  // it holds nothing or a version no longer kept.
  std::optional<Delta> delta_for(int64_t receiver_version) const;
  // Whether delta_for would give one (without encoding it).
  bool has_delta_for(int64_t receiver_version) const;
  bool anchor_due(int64_t version) const;

 private:
  const Bf16Image* base_for(int64_t receiver_version) const;
  int64_t anchor_every_;
  size_t versions_kept_;
  std::deque<Bf16Image> images_;  // oldest first
};

}  // namespace sao::weights
