// The GPU path's host-side logic, tested on every machine: device names and
// checks, the config keys that place models, the device-buffer weight pack
// (on the CPU here; tests/test_gpu_device_model.cpp repeats it on a GPU),
// NCCL bucket planning with a host-simulated broadcast, the CUDA IPC
// handle's text form, and the GPU sampler's inverse-CDF rule.
#include "base/error.hpp"
#include "config/run_config.hpp"
#include "gpu/bucket_plan.hpp"
#include "gpu/ipc_handle.hpp"
#include "model/device.hpp"
#include "model/generation.hpp"
#include "model/safetensors.hpp"
#include "model/tensor_blob.hpp"
#include "model/transformer.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

using sao::gpu::Bucket;
using sao::gpu::pieces_in;
using sao::gpu::plan_buckets;
using sao::model::PackedTensor;

namespace {

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const sao::Error& error) {
    return error.what();
  }
  return "";
}

PackedTensor entry(const std::string& name, uint64_t offset, uint64_t size) {
  PackedTensor e;
  e.name = name;
  e.dtype = "U8";
  e.shape = {static_cast<int64_t>(size)};
  e.offset = offset;
  e.size = size;
  return e;
}

sao::model::ModelConfig small_config() {
  sao::model::ModelConfig config;
  config.vocab_size = 40;
  config.hidden_size = 32;
  config.intermediate_size = 48;
  config.num_hidden_layers = 2;
  config.num_attention_heads = 4;
  config.num_key_value_heads = 2;
  config.max_position_embeddings = 64;
  return config;
}

}  // namespace

TEST_CASE("device names parse to devices; anything else names the key") {
  CHECK(sao::model::parse_device("cpu", "k").is_cpu());
  CHECK((sao::model::parse_device("cuda", "k") == torch::Device(torch::kCUDA, 0)));
  CHECK((sao::model::parse_device("cuda:3", "k") == torch::Device(torch::kCUDA, 3)));
  CHECK(sao::model::device_name(torch::Device(torch::kCUDA, 2)) == "cuda:2");
  CHECK(sao::model::device_name(torch::kCPU) == "cpu");
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "CUDA", "cuda:12345", ""}) {
    INFO(bad);
    CHECK(error_of([&] { sao::model::parse_device(bad, "learner.device"); }) ==
          std::string("learner.device: expected \"cpu\", \"cuda\" or \"cuda:N\", got \"") + bad + "\"");
  }
}

TEST_CASE("a CUDA device this process does not have is an error naming the key") {
  sao::model::require_device(torch::kCPU, "rollout.device");  // always there
  const auto count = sao::model::cuda_device_count();
  const auto past_the_end = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(count));
  const auto message = error_of([&] { sao::model::require_device(past_the_end, "rollout.device"); });
  if (count == 0) {
    CHECK(message.find("rollout.device: cuda:0 requested, but this sao has no CUDA device") == 0);
  } else {
    CHECK(message == "rollout.device: cuda:" + std::to_string(count) + " requested, but only " + std::to_string(count) +
                         " CUDA device(s) are present");
  }
}

TEST_CASE("the placement keys are read, bounded and written back") {
  auto document = sao::config::default_config_document();
  document["learner"]["device"] = "cuda:1";
  document["learner"]["bf16_autocast"] = true;
  document["rollout"]["device"] = "cuda";
  document["rollout"]["weights_dtype"] = "bf16";
  document["sft"]["device"] = "cuda:0";
  const auto config = sao::config::parse_run_config(document, "run.json");
  CHECK(config.learner.device == "cuda:1");
  CHECK(config.learner.bf16_autocast);
  CHECK(config.rollout.device == "cuda");
  CHECK(config.rollout.bf16_replica());
  CHECK(config.sft.device == "cuda:0");
  const auto written = sao::config::run_config_to_json(config);
  CHECK(written["learner"]["device"] == "cuda:1");
  CHECK(written["rollout"]["device"] == "cuda");
  CHECK(written["rollout"]["weights_dtype"] == "bf16");
  CHECK_FALSE(sao::config::parse_run_config(sao::config::default_config_document(), "run.json").rollout.bf16_replica());
  {
    auto bad = sao::config::default_config_document();
    bad["rollout"]["weights_dtype"] = "fp8";
    CHECK(error_of([&] { sao::config::parse_run_config(bad, "run.json"); }) ==
          "run.json.rollout.weights_dtype: expected \"fp32\" or \"bf16\", got \"fp8\"");
    auto old = sao::config::default_config_document();
    old["rollout"]["bf16_autocast"] = true;
    CHECK(error_of([&] { sao::config::parse_run_config(old, "run.json"); }) ==
          "run.json.rollout.bf16_autocast was replaced by weights_dtype: \"bf16\" runs a bf16 replica whose weights "
          "are converted once per version (set that, or drop the key)");
  }
  for (const char* section : {"learner", "rollout", "sft"}) {
    auto bad = sao::config::default_config_document();
    bad[section]["device"] = "tpu";
    const auto message = error_of([&] { sao::config::parse_run_config(bad, "run.json"); });
    INFO(message);
    CHECK(message.find(std::string(section) + ".device: expected \"cpu\", \"cuda\" or \"cuda:N\", got \"tpu\"") !=
          std::string::npos);
  }
}

TEST_CASE("a device pack has pack_module's layout and loads bit-identically (CPU buffer)") {
  sao::model::CausalLM source(small_config());
  sao::model::init_weights(*source, 3);
  sao::model::CausalLM target(small_config());
  sao::model::init_weights(*target, 4);
  const auto packed = sao::model::pack_module_on_device(*source, torch::kCPU);
  const auto host = sao::model::pack_module(*source);
  REQUIRE(packed.index.size() == host.index.size());
  for (size_t i = 0; i < host.index.size(); ++i) {
    CHECK(packed.index[i].name == host.index[i].name);
    CHECK(packed.index[i].offset == host.index[i].offset);
    CHECK(packed.index[i].size == host.index[i].size);
  }
  const auto downloaded = sao::model::download(packed);
  REQUIRE(downloaded.bytes.size() == host.bytes.size());
  for (const auto& e : host.index) {
    CHECK(std::memcmp(downloaded.bytes.data() + e.offset, host.bytes.data() + e.offset, e.size) == 0);
  }
  sao::model::load_device_packed_into_module(*target, packed, "test");
  const auto want = sao::model::named_tensors_of(*source);
  const auto got = sao::model::named_tensors_of(*target);
  for (size_t i = 0; i < want.size(); ++i) CHECK(torch::equal(want[i].second, got[i].second));
}

TEST_CASE("a device pack that does not fit the model changes nothing and names the tensor") {
  sao::model::CausalLM source(small_config());
  auto other = small_config();
  other.intermediate_size = 64;
  sao::model::CausalLM target(other);
  sao::model::init_weights(*target, 9);
  const auto before = sao::model::pack_module(*target);
  const auto packed = sao::model::pack_module_on_device(*source, torch::kCPU);
  CHECK(error_of([&] { sao::model::load_device_packed_into_module(*target, packed, "rollout-0: weights v3"); }) ==
        "rollout-0: weights v3: tensor 'model.layers.0.mlp.gate_proj.weight' has shape/dtype that does not match the "
        "model");
  const auto after = sao::model::pack_module(*target);
  CHECK(std::memcmp(before.bytes.data(), after.bytes.data(), before.bytes.size()) == 0);
  // A buffer one byte short: the last tensor's bytes are outside it.
  sao::model::CausalLM same_shape(small_config());
  sao::model::init_weights(*same_shape, 10);
  const auto same_before = sao::model::pack_module(*same_shape);
  auto truncated = packed;
  truncated.buffer = packed.buffer.narrow(0, 0, packed.buffer.numel() - 1);
  const auto& last = packed.index.back();
  CHECK(error_of([&] { sao::model::load_device_packed_into_module(*same_shape, truncated, "w"); }) ==
        "w: tensor '" + last.name + "': bytes " + std::to_string(last.offset) + "+" + std::to_string(last.size) +
            " lie outside the " + std::to_string(packed.buffer.numel() - 1) + "-byte buffer");
  const auto same_after = sao::model::pack_module(*same_shape);
  CHECK(std::memcmp(same_before.bytes.data(), same_after.bytes.data(), same_before.bytes.size()) == 0);
}

TEST_CASE("buckets follow tensor boundaries, cut tensors larger than the bound, and cover every byte once") {
  const std::vector<PackedTensor> index = {entry("a", 0, 100), entry("b", 128, 40), entry("c", 192, 300),
                                           entry("d", 512, 8)};
  const auto buckets = plan_buckets(index, 520, 200);
  REQUIRE(buckets.size() == 3);
  CHECK(buckets[0].offset == 0);
  CHECK(buckets[0].size == 168);  // a and b; c does not fit after them
  CHECK(buckets[1].offset == 168);
  CHECK(buckets[1].size == 200);  // the gap before c and c's first 176 bytes
  CHECK(buckets[2].offset == 368);
  CHECK(buckets[2].size == 152);  // c's last 124 bytes, the gap, d
  const auto middle = pieces_in(index, buckets[1]);
  REQUIRE(middle.size() == 1);
  CHECK(middle[0].tensor == 2);
  CHECK(middle[0].tensor_offset == 0);
  CHECK(middle[0].bucket_offset == 24);
  CHECK(middle[0].size == 176);
  const auto last = pieces_in(index, buckets[2]);
  REQUIRE(last.size() == 2);
  CHECK(last[0].tensor == 2);
  CHECK(last[0].tensor_offset == 176);
  CHECK(last[0].bucket_offset == 0);
  CHECK(last[0].size == 124);
  CHECK(last[1].tensor == 3);
  CHECK(last[1].bucket_offset == 144);
  CHECK(last[1].size == 8);

  const auto cut = plan_buckets({entry("big", 0, 1000)}, 1000, 300);
  REQUIRE(cut.size() == 4);
  CHECK(cut[3].offset == 900);
  CHECK(cut[3].size == 100);
  CHECK(plan_buckets({}, 0, 10).empty());
}

TEST_CASE("bad bucket plans are refused with the reason") {
  CHECK(error_of([] { plan_buckets({entry("a", 0, 8)}, 8, 0); }) ==
        "weight buckets: the bucket size must be > 0 bytes");
  CHECK(error_of([] {
          plan_buckets({entry("a", 64, 8), entry("b", 0, 8)}, 72, 16);
        }) == "weight buckets: tensor 'b' (bytes 0+8) is out of order or outside the 72-byte buffer");
  CHECK(error_of([] { plan_buckets({entry("a", 0, 80)}, 72, 16); }) ==
        "weight buckets: tensor 'a' (bytes 0+80) is out of order or outside the 72-byte buffer");
}

TEST_CASE("a bucketed broadcast, simulated on the host, rebuilds every tensor bit for bit") {
  // What NcclGroup::broadcast does per bucket, with memcpy for the wire.
  sao::model::CausalLM source(small_config());
  sao::model::init_weights(*source, 11);
  sao::model::CausalLM target(small_config());
  const auto packed = sao::model::pack_module(*source);
  for (const uint64_t bound : {uint64_t{64}, uint64_t{1000}, uint64_t{4096}, uint64_t{1} << 30}) {
    INFO("bucket bound " << bound);
    sao::model::init_weights(*target, 12);
    const auto buckets = plan_buckets(packed.index, packed.bytes.size(), bound);
    uint64_t covered = 0;
    auto tensors = sao::model::named_tensors_of(*target);
    for (const auto& bucket : buckets) {
      CHECK(bucket.offset == covered);
      CHECK(bucket.size <= bound);
      covered += bucket.size;
      std::vector<char> staging(packed.bytes.begin() + static_cast<int64_t>(bucket.offset),
                                packed.bytes.begin() + static_cast<int64_t>(bucket.offset + bucket.size));
      for (const auto& piece : pieces_in(packed.index, bucket)) {
        auto* destination = static_cast<char*>(tensors[piece.tensor].second.data_ptr());
        std::memcpy(destination + piece.tensor_offset, staging.data() + piece.bucket_offset, piece.size);
      }
    }
    CHECK(covered == packed.bytes.size());
    const auto want = sao::model::named_tensors_of(*source);
    for (size_t i = 0; i < want.size(); ++i) CHECK(torch::equal(want[i].second, tensors[i].second));
  }
}

TEST_CASE("a CUDA IPC handle survives its text form; malformed text is refused") {
  sao::gpu::IpcHandle handle;
  for (size_t i = 0; i < handle.bytes.size(); ++i) handle.bytes[i] = static_cast<char>(i * 37 + 1);
  handle.size = 123456789;
  handle.device_uuid = "GPU-0a1b2c3d-0000-1111-2222-333344445555";
  const auto text = sao::gpu::to_hex(handle);
  const auto back = sao::gpu::ipc_handle_from_hex(text);
  CHECK(back.bytes == handle.bytes);
  CHECK(back.size == handle.size);
  CHECK(back.device_uuid == handle.device_uuid);
  CHECK(error_of([] { sao::gpu::ipc_handle_from_hex("abc"); }) ==
        "CUDA IPC handle: expected 128 hex digits, ':', the byte count, ':', the GPU UUID");
  auto bad_digit = text;
  bad_digit[10] = 'g';
  CHECK(error_of([&] { sao::gpu::ipc_handle_from_hex(bad_digit); }).find("at byte 5 is not lower-case hex") !=
        std::string::npos);
  auto bad_count = text;
  bad_count.replace(129, 9, "12x456789");
  CHECK(error_of([&] { sao::gpu::ipc_handle_from_hex(bad_count); }) ==
        "CUDA IPC handle: byte count '12x456789' is not a number");
}

TEST_CASE("the GPU sampler picks the token whose CDF step holds the uniform, never an excluded one") {
  const auto ids_of = [](const torch::Tensor& chosen) {
    auto ids = chosen.view({-1}).to(torch::kInt64).contiguous();
    return std::vector<int64_t>(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
  };
  auto log_probs = torch::tensor({std::log(0.1f), std::log(0.2f), std::log(0.7f)}).view({1, 3}).repeat({5, 1});
  auto uniforms = torch::tensor({0.05, 0.15, 0.31, 0.35, 0.999}, torch::kFloat64).view({5, 1});
  CHECK(ids_of(sao::model::sample_on_device(log_probs, uniforms)) == std::vector<int64_t>{0, 1, 2, 2, 2});
  const float inf = std::numeric_limits<float>::infinity();
  auto masked = torch::tensor({-inf, std::log(0.5f), std::log(0.5f), 0.0f, -inf, -inf}).view({2, 3});
  CHECK(ids_of(sao::model::sample_on_device(masked, torch::tensor({0.0, 0.9999}, torch::kFloat64).view({2, 1}))) ==
        std::vector<int64_t>{1, 0});
  CHECK(ids_of(sao::model::sample_on_device(
            masked.narrow(0, 0, 1), torch::tensor({0.5}, torch::kFloat64).view({1, 1}))) == std::vector<int64_t>{2});
}
