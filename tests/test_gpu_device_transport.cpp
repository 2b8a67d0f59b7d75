// The GPU weight transports on a real GPU: CUDA IPC between two processes
// delivers the learner's weights bit for bit, a buffer of the caching
// allocator and a handle for another GPU are refused, and an NCCL bucketed
// broadcast (one rank: the only group one GPU allows) fills a replica bit
// for bit. Without a GPU it prints "skipped: no CUDA device" and exits 77.
#include "base/error.hpp"
#include "gpu/cuda_ipc.hpp"
#include "gpu/nccl_broadcast.hpp"
#include "model/device.hpp"
#include "model/safetensors.hpp"
#include "model/tensor_blob.hpp"
#include "model/transformer.hpp"

#include "test_gpu_device_main.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace {

const torch::Device kGpu(torch::kCUDA, 0);

sao::model::CausalLM gpu_policy(uint64_t seed) {
  sao::model::CausalLM policy(sao::test::default_model_config());
  sao::model::init_weights(*policy, seed);
  policy->to(kGpu);
  return policy;
}

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const sao::Error& error) {
    return error.what();
  }
  return "";
}

}  // namespace

TEST_CASE("CUDA IPC hands the packed weights to another process bit for bit") {
  auto policy = gpu_policy(1);
  const auto packed = sao::gpu::pack_module_for_ipc(*policy, kGpu);
  const auto handle = sao::gpu::export_ipc_handle(packed);
  CHECK(handle.size == static_cast<uint64_t>(packed.buffer.numel()));
  CHECK(handle.device_uuid.rfind("GPU-", 0) == 0);
  const auto out = std::filesystem::temp_directory_path() / "sao_ipc_weights.bin";
  std::filesystem::remove(out);
  const std::string command = std::string(SAO_GPU_IPC_CHILD) + " " + sao::gpu::to_hex(handle) + " " + out.string();
  REQUIRE(std::system(command.c_str()) == 0);
  std::ifstream in(out, std::ios::binary);
  const std::vector<char> received((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto expected = sao::model::download(packed);
  REQUIRE(received.size() == expected.bytes.size());
  CHECK(std::memcmp(received.data(), expected.bytes.data(), received.size()) == 0);
  // And the same bytes are the model's: the host pack of the module.
  const auto host = sao::model::pack_module(*policy);
  CHECK(std::memcmp(received.data(), host.bytes.data(), host.bytes.size()) == 0);
}

TEST_CASE("only pack_module_for_ipc's own allocations are exported; another GPU's handle is refused") {
  auto policy = gpu_policy(2);
  const auto cached = sao::model::pack_module_on_device(*policy, kGpu);  // caching allocator
  CHECK(error_of([&] { sao::gpu::export_ipc_handle(cached); }) ==
        "CUDA IPC: the buffer was not made by pack_module_for_ipc (only its own allocations can be shared)");
  const auto packed = sao::gpu::pack_module_for_ipc(*policy, kGpu);
  auto handle = sao::gpu::export_ipc_handle(packed);
  handle.device_uuid = "GPU-00000000-0000-0000-0000-000000000000";
  const auto message = error_of([&] { sao::gpu::IpcImport imported(handle, packed.index, kGpu); });
  CHECK(message.find("CUDA IPC: the weights are on GPU-00000000-0000-0000-0000-000000000000, this process runs on "
                     "GPU-") == 0);
}

TEST_CASE("an NCCL bucketed broadcast fills a replica bit for bit") {
  auto source = gpu_policy(3);
  auto target = gpu_policy(4);
  const auto packed = sao::model::pack_module_on_device(*source, kGpu);
  sao::gpu::NcclGroup group(sao::gpu::new_nccl_unique_id(), 0, 1, kGpu);
  CHECK(group.ranks() == 1);
  // A small bound, so that tensors are cut across buckets.
  group.broadcast(0, &packed, target.get(), packed.index, static_cast<uint64_t>(packed.buffer.numel()), 4096, "test");
  const auto want = sao::model::named_tensors_of(*source);
  const auto got = sao::model::named_tensors_of(*target);
  for (size_t i = 0; i < want.size(); ++i) CHECK(torch::equal(want[i].second, got[i].second));
  auto wrong = packed.index;
  wrong[0].name = "model.nothing";
  CHECK(error_of([&] {
          group.broadcast(0, &packed, target.get(), wrong, static_cast<uint64_t>(packed.buffer.numel()), 4096, "v7");
        }) == "v7: tensor 'model.nothing' is not a parameter of this model");
}
