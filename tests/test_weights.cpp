// The weights module: the checksum (against libxxhash's one-shot XXH3 of the
// same bytes), the packet's route rules, the sender's one choice of route
// with refusals, and the receiver's take / load / verify for every route
// that runs on a CPU (CUDA IPC is tests/test_gpu_device_transport.cpp's).
#include "base/error.hpp"
#include "model/safetensors.hpp"
#include "model/tensor_blob.hpp"
#include "model/transformer.hpp"
#include "net/bulk_transfer.hpp"
#include "test_tiny_model.hpp"
#include "weights/checksum.hpp"
#include "weights/delta.hpp"
#include "weights/receiver.hpp"
#include "weights/replica.hpp"
#include "weights/sender.hpp"

#include <doctest/doctest.h>
#include <xxhash.h>

#include <cstring>
#include <functional>
#include <limits>
#include <string>

namespace {

std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const sao::Error& error) {
    return error.what();
  }
  return "";
}

sao::model::PackedTensors two_tensors() {
  return sao::model::pack_tensors(
      {{"model.norm.weight", torch::tensor({1.5f, -2.0f, 3.25f})}, {"ids", torch::tensor({1, 2}, torch::kInt64)}});
}

bool same_weights(const sao::model::CausalLM& a, const sao::model::CausalLM& b) {
  const auto left = sao::model::pack_module(*a);
  const auto right = sao::model::pack_module(*b);
  return left.bytes == right.bytes;
}

}  // namespace

TEST_CASE("a version's checksum is XXH3-64 of its tensors' bytes in index order, without the padding") {
  const auto packed = two_tensors();
  // 12 bytes of F32 at offset 0, padding to 64, 16 bytes of I64.
  REQUIRE(packed.index[1].offset == 64);
  std::string joined(packed.bytes.data(), 12);
  joined.append(packed.bytes.data() + 64, 16);
  CHECK(sao::weights::checksum_of(packed) == XXH3_64bits(joined.data(), joined.size()));
  // The padding is not hashed; one changed weight byte changes the sum.
  auto padded = packed;
  padded.bytes[20] = 0x7f;
  CHECK(sao::weights::checksum_of(padded) == sao::weights::checksum_of(packed));
  auto changed = packed;
  changed.bytes[3] ^= 0x01;
  CHECK(sao::weights::checksum_of(changed) != sao::weights::checksum_of(packed));
  // A device pack (here on the CPU) and a module hash the same bytes.
  sao::model::CausalLM policy(sao_test::tiny_byte_model());
  sao::model::init_weights(*policy, 3);
  const auto host = sao::model::pack_module(*policy);
  const auto device = sao::model::pack_module_on_device(*policy, torch::kCPU);
  CHECK(sao::weights::checksum_of(device) == sao::weights::checksum_of(host));
  CHECK(sao::weights::checksum_of_module(*policy, host.index) == sao::weights::checksum_of(host));
  CHECK(sao::weights::checksum_text(0x0123456789abcdefULL) == "0123456789abcdef");
  // An index that points outside the buffer, a tensor the model lacks.
  auto outside = packed;
  outside.index[1].offset = 70;
  CHECK(error_of([&] { sao::weights::checksum_of(outside); }) ==
        "checksum: tensor 'ids' lies outside the 80-byte buffer");
  auto unknown = host;
  unknown.index[0].name = "missing.weight";
  CHECK(error_of([&] { sao::weights::checksum_of_module(*policy, unknown.index); }) ==
        "checksum: the model has no tensor 'missing.weight'");
}

TEST_CASE("a packet's fields must agree with its route") {
  using sao::weights::Route;
  auto packet = sao::weights::host_packet(4, two_tensors());
  CHECK(packet.route == Route::kCafBytes);
  CHECK(packet.checksum == sao::weights::checksum_of(packet.tensors));
  CHECK(error_of([&] { sao::weights::check_packet(packet, "rollout-0: weights v4"); }).empty());
  auto with_port = packet;
  with_port.bulk_port = 9;
  CHECK(error_of([&] { sao::weights::check_packet(with_port, "rollout-0: weights v4"); }) ==
        "rollout-0: weights v4: a caf_bytes packet must carry the bytes and nothing else");
  auto notice = packet;
  notice.route = Route::kBulkChannel;
  CHECK(error_of([&] { sao::weights::check_packet(notice, "w"); }) ==
        "w: a bulk_channel packet must carry a bulk port and no bytes");
  auto handle = packet;
  handle.route = Route::kCudaIpc;
  handle.tensors.bytes.clear();
  CHECK(error_of([&] { sao::weights::check_packet(handle, "w"); }) ==
        "w: a cuda_ipc packet must carry an IPC handle and nothing else");
  auto device = packet;
  device.route = Route::kDeviceCopy;
  CHECK(error_of([&] { sao::weights::check_packet(device, "w"); }) ==
        "w: a device_copy packet must carry a device buffer and nothing else");
  // A peer's route number that no route has, a negative version, no index.
  auto unknown = packet;
  unknown.route = static_cast<Route>(9);
  CHECK(error_of([&] { sao::weights::check_packet(unknown, "w"); }) == "w: unknown weight route 9");
  CHECK_FALSE(sao::weights::route_from_value(5).has_value());
  CHECK(sao::weights::route_from_value(1) == Route::kBulkChannel);
  CHECK(sao::weights::route_from_value(4) == Route::kBf16Delta);
  // A delta: to this version, from an earlier one, nothing else; and only on its route.
  auto delta = packet;
  delta.route = Route::kBf16Delta;
  delta.tensors.bytes.clear();
  delta.delta.base_version = 3;
  delta.delta.version = 4;
  delta.delta.elements = 5;
  CHECK(error_of([&] { sao::weights::check_packet(delta, "w"); }).empty());
  auto ahead = delta;
  ahead.delta.base_version = 4;
  CHECK(error_of([&] { sao::weights::check_packet(ahead, "w"); }) ==
        "w: a bf16_delta packet has base v4, not an earlier version");
  auto other = delta;
  other.delta.version = 7;
  CHECK(error_of([&] { sao::weights::check_packet(other, "w"); }) == "w: a bf16_delta packet is a delta to v7, not v4");
  auto too_many = delta;
  too_many.delta.changed = 6;
  CHECK(error_of([&] { sao::weights::check_packet(too_many, "w"); }) ==
        "w: a bf16_delta packet changes 6 of 5 elements");
  auto with_bytes = delta;
  with_bytes.tensors.bytes = packet.tensors.bytes;
  CHECK(error_of([&] { sao::weights::check_packet(with_bytes, "w"); }) ==
        "w: a bf16_delta packet must carry the delta and nothing else");
  auto stray = packet;
  stray.delta = delta.delta;
  CHECK(error_of([&] { sao::weights::check_packet(stray, "w"); }) == "w: a caf_bytes packet carries a delta");
  auto negative = packet;
  negative.version = -2;
  CHECK(error_of([&] { sao::weights::check_packet(negative, "w"); }) ==
        "w: a caf_bytes packet has a negative version -2");
  auto empty = packet;
  empty.tensors.index.clear();
  CHECK(error_of([&] { sao::weights::check_packet(empty, "w"); }) == "w: a caf_bytes packet has no tensor index");
}

TEST_CASE("the sender chooses the first route that reaches a rollout and skips the ones it refused") {
  using sao::weights::Route;
  sao::model::CausalLM policy(sao_test::tiny_byte_model());
  sao::model::init_weights(*policy, 1);
  const auto host = sao::weights::host_packet(1, sao::model::pack_module(*policy));
  const auto device = sao::weights::device_packet(1, std::make_shared<const sao::model::DevicePackedTensors>(
                                                         sao::model::pack_module_on_device(*policy, torch::kCPU)));
  CHECK(device.checksum == host.checksum);
  sao::weights::Placement here;
  here.same_process = true;
  sao::weights::Placement elsewhere;
  SUBCASE("without a bulk server") {
    sao::weights::Sender sender;
    // Host weights travel as CAF bytes wherever the rollout is.
    CHECK(sender.choose(host, "r", here) == Route::kCafBytes);
    CHECK(sender.choose(host, "r", elsewhere) == Route::kCafBytes);
    // A device buffer is copied in the learner's process; another process
    // (no shared GPU here) gets CAF bytes, downloaded once.
    CHECK(sender.choose(device, "r", here) == Route::kDeviceCopy);
    CHECK(sender.choose(device, "r", elsewhere) == Route::kCafBytes);
    CHECK(sender.reads_source_in_place(Route::kDeviceCopy));
    CHECK_FALSE(sender.reads_source_in_place(Route::kCafBytes));
    const auto bytes = sender.carry(Route::kCafBytes, device, nullptr, {});
    CHECK(bytes.route == Route::kCafBytes);
    CHECK(bytes.tensors.bytes == host.tensors.bytes);
    CHECK(bytes.checksum == host.checksum);
    // Refused routes are skipped until the rollout registers anew; CAF bytes
    // are never refused.
    CHECK(sender.refuse("r", Route::kDeviceCopy));
    CHECK_FALSE(sender.refuse("r", Route::kDeviceCopy));
    CHECK_FALSE(sender.refuse("r", Route::kCafBytes));
    CHECK(sender.refusals() == 1);
    CHECK(sender.choose(device, "r", here) == Route::kCafBytes);
    CHECK(sender.choose(device, "other", here) == Route::kDeviceCopy);
    sender.forget("r");
    CHECK(sender.choose(device, "r", here) == Route::kDeviceCopy);
    CHECK(error_of([&] { sender.carry(Route::kBulkChannel, host, nullptr, {}); }) ==
          "bulk channel: this sender has no bulk server");
  }
  SUBCASE("with a bulk server, every route that runs here delivers the same checked weights") {
    auto server = std::make_shared<sao::net::BulkServer>("127.0.0.1", 0, "secret");
    sao::weights::Sender sender(server);
    CHECK(sender.choose(host, "r", here) == Route::kCafBytes);
    CHECK(sender.choose(host, "r", elsewhere) == Route::kBulkChannel);
    CHECK(sender.choose(device, "r", elsewhere) == Route::kBulkChannel);
    auto reader = std::make_shared<sao::net::SharedBulkReader>("127.0.0.1", "secret", 10000);
    for (const auto route : {Route::kCafBytes, Route::kBulkChannel, Route::kDeviceCopy}) {
      CAPTURE(sao::weights::route_name(route));
      const auto packet = route == Route::kCafBytes ? host : sender.carry(route, device, nullptr, {});
      CHECK(packet.route == route);
      CHECK(packet.checksum == host.checksum);
      sao::model::CausalLM copy(sao_test::tiny_byte_model());
      sao::model::init_weights(*copy, 2);
      sao::weights::Receiver receiver(torch::kCPU, reader);
      REQUIRE(receiver.take(packet, "copy: weights v1"));
      const auto applied = receiver.apply(packet, *copy, "copy: weights v1");
      CHECK(applied.verified);
      CHECK(applied.checksum == host.checksum);
      CHECK(same_weights(copy, policy));
    }
    CHECK(server->stats().served == 1);
  }
}

TEST_CASE("a receiver reports weights that do not match the version's checksum, and refuses a bad packet") {
  sao::model::CausalLM policy(sao_test::tiny_byte_model());
  sao::model::init_weights(*policy, 1);
  auto packet = sao::weights::host_packet(3, sao::model::pack_module(*policy));
  const auto honest = packet.checksum;
  packet.checksum ^= 1;  // as if bytes had changed on the way
  sao::model::CausalLM copy(sao_test::tiny_byte_model());
  sao::weights::Receiver receiver(torch::kCPU, nullptr);
  REQUIRE(receiver.take(packet, "r: weights v3"));
  const auto applied = receiver.apply(packet, *copy, "r: weights v3");
  CHECK_FALSE(applied.verified);
  CHECK(applied.checksum == honest);
  // A notice without a reader; a packet whose fields disagree with its route.
  auto notice = packet;
  notice.route = sao::weights::Route::kBulkChannel;
  notice.tensors.bytes.clear();
  notice.bulk_port = 4000;
  notice.bulk_bytes = 10;
  CHECK(error_of([&] { receiver.take(notice, "r: weights v3"); }) ==
        "r: weights v3: this receiver has no reader for the bulk channel");
  auto handle = packet;
  handle.route = sao::weights::Route::kCudaIpc;
  handle.tensors.bytes.clear();
  handle.locator = "ff";
  REQUIRE(receiver.take(handle, "r: weights v3"));
  CHECK(error_of([&] { receiver.apply(handle, *copy, "r: weights v3"); }) ==
        "r: weights v3: a CUDA IPC handle for a receiver that runs on the CPU");
  auto bad = packet;
  bad.locator = "ff";
  CHECK(error_of([&] { receiver.take(bad, "r: weights v3"); }) ==
        "r: weights v3: a caf_bytes packet must carry the bytes and nothing else");
}

TEST_CASE("a bf16 image rounds exactly as torch does, and a delta rebuilds the next image bit for bit") {
  // Reference: torch's own F32 -> BF16 conversion, on values that include
  // ties, subnormals, infinities, a NaN and the largest finite floats.
  torch::manual_seed(7);
  auto values = torch::randn({4096}, torch::TensorOptions().dtype(torch::kFloat32));
  const float specials[] = {0.0f,
                            -0.0f,
                            1.00390625f,  // exactly halfway between two bf16 values: rounds to even
                            1.01171875f,  // halfway, rounds up to even
                            1e-40f,
                            -3e-39f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::quiet_NaN()};
  for (size_t i = 0; i < sizeof(specials) / sizeof(float); ++i) values[static_cast<int64_t>(i)] = specials[i];
  const auto packed = sao::model::pack_tensors({{"w", values}, {"b", values.narrow(0, 0, 7).to(torch::kBFloat16)}});
  const auto image = sao::weights::bf16_image(packed, 5);
  REQUIRE(image.values.size() == 4096 + 7);
  const auto reference = values.to(torch::kBFloat16).contiguous();
  CHECK(std::memcmp(image.values.data(), reference.data_ptr(), 4096 * 2) == 0);
  CHECK(std::memcmp(image.values.data() + 4096, reference.data_ptr(), 7 * 2) == 0);
  CHECK(image.values[2] == 0x3f80);  // 1 + 2^-8: halfway, to the even 1.0
  CHECK(image.values[3] == 0x3f82);  // 1 + 3 * 2^-8: halfway, to the even 1 + 2^-6
  CHECK(error_of([] {
          sao::weights::bf16_image(sao::model::pack_tensors({{"ids", torch::tensor({1}, torch::kInt64)}}), 0);
        }) == "bf16 image: tensor 'ids' is I64; a bf16 replica holds F32 and BF16 tensors only");

  // v6: a few elements moved by more than half a bf16 step, most by less.
  auto moved = values.clone();
  moved.narrow(0, 100, 50) += 1e-7f;  // below half a step for these values: same bf16
  moved[200] = moved[200].item<float>() * 1.5f;
  moved[4095] = -moved[4095].item<float>() - 1.0f;  // a sign change: a large bit-pattern change
  moved[201] = 1.0f;
  const auto next = sao::weights::bf16_image(
      sao::model::pack_tensors({{"w", moved}, {"b", values.narrow(0, 0, 7).to(torch::kBFloat16)}}), 6);
  const auto delta = sao::weights::encode_delta(image, next);
  CHECK(delta.base_version == 5);
  CHECK(delta.version == 6);
  CHECK(delta.elements == 4103);
  int64_t differing = 0;
  for (size_t i = 0; i < next.values.size(); ++i) differing += next.values[i] != image.values[i] ? 1 : 0;
  CHECK(delta.changed == static_cast<uint64_t>(differing));
  CHECK(delta.changed >= 2);
  CHECK(delta.changed <= 3);  // 200 changed, 4095 changed, 201 unless it was 1.0 already
  CHECK(delta.checksum == sao::weights::checksum_of(next));
  auto rebuilt = image;
  sao::weights::apply_delta(rebuilt, delta);
  CHECK(rebuilt.version == 6);
  CHECK(rebuilt.values == next.values);
  // No change: an empty payload; applying it changes nothing but the version.
  const auto same = sao::weights::encode_delta(next, next);
  CHECK(same.changed == 0);
  CHECK(same.payload.empty());

  // What a receiver refuses, each with the image's state after.
  auto wrong_base = image;
  wrong_base.version = 4;
  CHECK(error_of([&] { sao::weights::apply_delta(wrong_base, delta); }) == "delta v5 -> v6: the receiver holds v4");
  auto short_image = image;
  short_image.values.pop_back();
  CHECK(error_of([&] { sao::weights::apply_delta(short_image, delta); }) ==
        "delta v5 -> v6: for 4103 elements, the receiver holds 4102");
  auto truncated = delta;
  truncated.payload.pop_back();
  auto target = image;
  CHECK(error_of([&] { sao::weights::apply_delta(target, truncated); }) ==
        "delta v5 -> v6: the payload ends inside change " + std::to_string(delta.changed - 1) + " or it is malformed");
  auto bad_marker = delta;
  bad_marker.payload[0] = 0x81;  // a long form's marker with a stray bit
  target = image;
  CHECK(error_of([&] { sao::weights::apply_delta(target, bad_marker); }) ==
        "delta v5 -> v6: the payload ends inside change 0 or it is malformed");
  auto trailing = delta;
  trailing.payload.push_back(0);
  target = image;
  CHECK(error_of([&] { sao::weights::apply_delta(target, trailing); }) ==
        "delta v5 -> v6: the payload has bytes past its last change");
  auto past_end = delta;
  past_end.payload = {0x80, 0xff, 0xff, 0x03, 0x02};  // a gap of 65535
  past_end.changed = 1;
  target = image;
  CHECK(error_of([&] { sao::weights::apply_delta(target, past_end); }) == "delta v5 -> v6: change 0 lies past the end");
  auto forged = delta;
  forged.checksum ^= 1;
  target = image;
  CHECK(error_of([&] { sao::weights::apply_delta(target, forged); }) ==
        "delta v5 -> v6: the result does not match the version's checksum");
  CHECK(target.version == -1);  // holds neither version now
  CHECK(error_of([&] { sao::weights::encode_delta(image, short_image); }) == "delta: v5 has 4103 elements, v5 4102");
}

TEST_CASE("a change of one bf16 step at a short gap costs one byte, any other a marker and two varints") {
  sao::weights::Bf16Image base;
  base.version = 1;
  base.values.assign(1000, static_cast<uint16_t>(0x3c00));
  auto next = base;
  next.version = 2;
  next.values[0] += 1;    // gap 0, +1: 0x00
  next.values[63] -= 1;   // gap 62, -1: 0x40 | 62
  next.values[200] += 1;  // gap 136: long form, 0x80 0x88 0x01 0x02
  next.values[201] += 3;  // gap 0, +3: long form, 0x80 0x00 0x06
  const auto delta = sao::weights::encode_delta(base, next);
  CHECK(delta.changed == 4);
  CHECK(delta.payload == std::vector<uint8_t>{0x00, 0x7e, 0x80, 0x88, 0x01, 0x02, 0x80, 0x00, 0x06});
  CHECK(delta.wire_bytes() == 9 + 40);
  auto rebuilt = base;
  sao::weights::apply_delta(rebuilt, delta);
  CHECK(rebuilt.values == next.values);
}

TEST_CASE("the delta history sends a delta to a receiver it can reach, and the full version at an anchor") {
  sao::weights::DeltaHistory history(/*anchor_every=*/4, /*versions_kept=*/2);
  CHECK(history.newest() == nullptr);
  CHECK_FALSE(history.delta_for(0).has_value());
  const auto image_at = [](int64_t version) {
    sao::weights::Bf16Image image;
    image.version = version;
    image.values.assign(64, static_cast<uint16_t>(0x3f80));
    image.values[static_cast<size_t>(version)] = 0x4000;
    return image;
  };
  history.add(image_at(1));
  history.add(image_at(2));
  history.add(image_at(3));
  REQUIRE(history.newest() != nullptr);
  CHECK(history.newest()->version == 3);
  const auto delta = history.delta_for(2);
  REQUIRE(delta.has_value());
  CHECK(delta->base_version == 2);
  CHECK(delta->changed == 2);
  CHECK_FALSE(history.delta_for(1).has_value());  // no longer kept: the full version
  CHECK_FALSE(history.delta_for(3).has_value());  // already there
  CHECK_FALSE(history.delta_for(-1).has_value());
  history.add(image_at(4));
  CHECK(history.anchor_due(4));
  CHECK_FALSE(history.delta_for(3).has_value());  // an anchor goes out in full
  CHECK(error_of([&] { history.add(image_at(4)); }) == "delta: v4 is not newer than v4");
  CHECK(error_of([] { sao::weights::DeltaHistory(0, 2); }) == "delta: anchor_every must be >= 1, got 0");
}

namespace {

// The policy's parameters as a bf16 replica should hold them: torch's rounding of each.
bool holds_bf16_of(const sao::model::CausalLM& replica, const sao::model::CausalLM& policy) {
  const auto expected = sao::model::named_tensors_of(*policy);
  const auto held = sao::model::named_tensors_of(*replica);
  if (expected.size() != held.size()) return false;
  for (size_t i = 0; i < held.size(); ++i) {
    if (held[i].second.scalar_type() != torch::kBFloat16) return false;
    if (!torch::equal(held[i].second, expected[i].second.to(torch::kBFloat16))) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("a bf16 replica loads a version's bf16 form, and a delta takes it to the next version exactly") {
  using sao::weights::Route;
  sao::model::CausalLM policy(sao_test::tiny_byte_model());
  sao::model::init_weights(*policy, 1);
  const auto v1 = sao::weights::host_packet(1, sao::model::pack_module(*policy));
  const auto b1 = sao::weights::bf16_packet(v1);
  // The bf16 form: every tensor BF16, half the bytes, and the checksum of
  // the image torch's rounding makes of the fp32 version.
  CHECK(b1.route == Route::kCafBytes);
  CHECK(b1.version == 1);
  CHECK(sao::weights::is_bf16_version(b1));
  CHECK_FALSE(sao::weights::is_bf16_version(v1));
  for (const auto& entry : b1.tensors.index) CHECK(entry.dtype == "BF16");
  CHECK(b1.checksum == sao::weights::checksum_of(sao::weights::bf16_image(v1.tensors, 1)));
  CHECK(sao::weights::image_of_packet(b1).values == sao::weights::bf16_image(v1.tensors, 1).values);
  // The same made from a device pack (here on the CPU), as a GPU learner's.
  const auto on_device = sao::weights::device_packet(1, std::make_shared<const sao::model::DevicePackedTensors>(
                                                            sao::model::pack_module_on_device(*policy, torch::kCPU)));
  const auto b1_device = sao::weights::bf16_packet(on_device);
  CHECK(b1_device.route == Route::kDeviceCopy);
  CHECK(b1_device.checksum == b1.checksum);

  sao::model::CausalLM replica(sao_test::tiny_byte_model());
  replica->to(torch::kBFloat16);
  sao::weights::Receiver receiver(torch::kCPU, nullptr);
  // The fp32 form does not fit a bf16 replica: refused by name, never narrowed.
  CHECK(error_of([&] { receiver.apply(v1, *replica, "r: weights v1"); }).find("does not match the model") !=
        std::string::npos);
  REQUIRE(receiver.take(b1, "r: weights v1"));
  auto applied = receiver.apply(b1, *replica, "r: weights v1");
  CHECK(applied.verified);
  CHECK(holds_bf16_of(replica, policy));

  // The next version: a small update, as a learner step makes.
  {
    torch::NoGradGuard no_grad;
    torch::manual_seed(5);
    for (auto& parameter : policy->parameters()) parameter.add_(torch::randn_like(parameter) * 1e-5);
  }
  const auto b2 = sao::weights::bf16_packet(sao::weights::host_packet(2, sao::model::pack_module(*policy)));
  sao::weights::Sender sender;
  sao::weights::Placement remote;
  remote.bf16_replica = true;
  remote.version = 1;
  sao::weights::Placement local = remote;
  local.same_process = true;
  sao::weights::Placement fp32_remote = remote;
  fp32_remote.bf16_replica = false;
  sender.add_replica_version(sao::weights::image_of_packet(b1));
  // Until v2's image is kept there is no delta to v2.
  CHECK(sender.choose(b2, "rollout-0", remote) == Route::kCafBytes);
  sender.add_replica_version(sao::weights::image_of_packet(b2));
  CHECK(sender.choose(b2, "rollout-0", remote) == Route::kBf16Delta);
  CHECK(sender.choose(b2, "rollout-1", local) == Route::kCafBytes);        // in-process: nothing to save
  CHECK(sender.choose(b2, "rollout-2", fp32_remote) == Route::kCafBytes);  // an fp32 copy takes no deltas
  auto behind = remote;
  behind.version = 0;  // an image no longer kept: the full version
  CHECK(sender.choose(b2, "rollout-3", behind) == Route::kCafBytes);
  CHECK(sender.packet_key(Route::kBf16Delta, remote) == 1);
  CHECK(sender.packet_key(Route::kCafBytes, remote) == -1);

  const auto delta = sender.carry(Route::kBf16Delta, b2, nullptr, remote);
  CHECK(error_of([&] { sao::weights::check_packet(delta, "r: weights v2"); }).empty());
  CHECK(delta.delta.base_version == 1);
  CHECK(delta.checksum == b2.checksum);
  CHECK(delta.delta.changed > 0);
  CHECK(delta.delta.wire_bytes() < b2.tensors.bytes.size() / 4);
  // A receiver that holds another version refuses it by name, unchanged.
  sao::model::CausalLM stranger(sao_test::tiny_byte_model());
  stranger->to(torch::kBFloat16);
  const auto before = sao::model::pack_module(*stranger).bytes;
  sao::weights::Receiver fresh(torch::kCPU, nullptr);
  CHECK(error_of([&] { fresh.apply(delta, *stranger, "s: weights v2"); }) ==
        "s: weights v2: a bf16 delta from v1, but this receiver holds v-1");
  CHECK(sao::model::pack_module(*stranger).bytes == before);
  // An fp32 model cannot take a delta.
  sao::model::CausalLM full(sao_test::tiny_byte_model());
  sao::weights::Receiver full_receiver(torch::kCPU, nullptr);
  REQUIRE(full_receiver.apply(v1, *full, "f: weights v1").verified);
  CHECK(error_of([&] { full_receiver.apply(delta, *full, "f: weights v2"); }) ==
        "bf16 replica: tensor 'model.embed_tokens.weight' is F32, not BF16 (rollout.weights_dtype)");
  // The replica holding v1 takes the delta: exactly v2's bf16 values.
  REQUIRE(receiver.take(delta, "r: weights v2"));
  applied = receiver.apply(delta, *replica, "r: weights v2");
  CHECK(applied.verified);
  CHECK(applied.checksum == b2.checksum);
  CHECK(holds_bf16_of(replica, policy));
  // A forged delta (its result's checksum is not the version's) leaves the replica as it was.
  auto forged = delta;
  forged.version = 3;
  forged.delta.base_version = 2;
  forged.delta.version = 3;
  forged.delta.changed = 0;
  forged.delta.payload.clear();
  forged.delta.checksum = b2.checksum ^ 1;
  const auto at_v2 = sao::model::pack_module(*replica).bytes;
  CHECK(error_of([&] { receiver.apply(forged, *replica, "r: weights v3"); }) ==
        "r: weights v3: delta v2 -> v3: the result does not match the version's checksum");
  CHECK(sao::model::pack_module(*replica).bytes == at_v2);
}
