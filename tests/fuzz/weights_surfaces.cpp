// Weight sync's untrusted inputs: a weight packet as a peer's CAF bytes
// (deserialised, checked against its route, taken and loaded into a model
// by a Receiver), and a bf16 delta's payload applied to a replica's image.
#include "actors/messages.hpp"
#include "fuzz_harness.hpp"
#include "model/tensor_blob.hpp"
#include "model/transformer.hpp"
#include "weights/delta.hpp"
#include "weights/receiver.hpp"

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include <cstring>

namespace sao_fuzz {

namespace {

std::string serialised(sao::weights::Packet packet) {
  std::vector<char> bytes;
  caf::binary_serializer sink{nullptr, bytes};
  if (sink(packet)) throw std::runtime_error("weight_packet: the seed did not serialise");
  return std::string(bytes.begin(), bytes.end());
}

// The base image every delta case starts from, and its next version.
const sao::weights::Bf16Image& base_image() {
  static const auto image = [] {
    sao::weights::Bf16Image made;
    made.version = 4;
    made.values.resize(512);
    for (size_t i = 0; i < made.values.size(); ++i) made.values[i] = static_cast<uint16_t>(0x3c00 + (i * 37) % 200);
    return made;
  }();
  return image;
}

}  // namespace

Surface weight_packet_surface() {
  Surface surface;
  surface.name = "weight_packet";
  sao::model::CausalLM policy(tiny());
  sao::model::init_weights(*policy, 1);
  const auto packet = sao::weights::host_packet(3, sao::model::pack_module(*policy));
  surface.seeds = {serialised(packet)};
  // Mutations reach the other routes through the route byte; a notice or a
  // handle is refused by name here (no bulk reader, no GPU).
  surface.run = [](const std::string& input, const fs::path&) {
    std::vector<char> bytes(input.begin(), input.end());
    sao::weights::Packet received;
    caf::binary_deserializer source{nullptr, bytes};
    if (auto error = source(received)) return Outcome::kClean;  // CAF refused the bytes
    sao::model::CausalLM model(tiny());
    // No bulk reader: a notice is refused by name, never read from a port.
    sao::weights::Receiver receiver(torch::kCPU, nullptr);
    if (!receiver.take(received, "fuzz: weights")) return Outcome::kClean;
    receiver.apply(received, *model, "fuzz: weights");
    return Outcome::kAccepted;
  };
  return surface;
}

Surface weight_delta_surface() {
  Surface surface;
  surface.name = "weight_delta";
  auto next = base_image();
  next.version = 5;
  for (size_t i = 0; i < next.values.size(); i += 7) next.values[i] = static_cast<uint16_t>(next.values[i] + 1);
  next.values[100] = static_cast<uint16_t>(next.values[100] - 300);
  const auto delta = sao::weights::encode_delta(base_image(), next);
  // The case is the change count (8 bytes) and the payload.
  std::string seed(8, '\0');
  std::memcpy(seed.data(), &delta.changed, sizeof(delta.changed));
  seed.append(delta.payload.begin(), delta.payload.end());
  surface.seeds = {seed};
  const uint64_t checksum = delta.checksum;
  surface.run = [checksum](const std::string& input, const fs::path&) {
    if (input.size() < 8) return Outcome::kClean;
    sao::weights::Delta case_delta;
    case_delta.base_version = 4;
    case_delta.version = 5;
    case_delta.elements = base_image().values.size();
    std::memcpy(&case_delta.changed, input.data(), sizeof(case_delta.changed));
    case_delta.payload.assign(input.begin() + 8, input.end());
    case_delta.checksum = checksum;
    auto image = base_image();
    sao::weights::apply_delta(image, case_delta);
    return Outcome::kAccepted;
  };
  return surface;
}

}  // namespace sao_fuzz
