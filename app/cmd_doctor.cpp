// `sao doctor`: what this build and this machine will actually run with,
// and with --model what sao makes of a Hugging Face model directory.
// The BLAS line matters most: Debian's reference BLAS makes LibTorch matmuls
// 20-40x slower than OpenBLAS, and nothing else would tell you.
#include "app/args.hpp"
#include "app/commands.hpp"
#include "base/allocator.hpp"
#include "base/error.hpp"
#include "base/json_parse.hpp"
#include "config/model_directory.hpp"
#include "model/device.hpp"
#include "model/model_config.hpp"
#include "model/regular_file.hpp"
#include "report/system_info.hpp"
#include "sao/build_info.hpp"
#include "train/memory_estimate.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <thread>

namespace sao::cli {

int run_doctor(const Args& args) {
  const std::vector<FlagSpec> specs = {
      {"--threads", true, false, "LibTorch/OpenBLAS threads to configure before measuring (default 2)"},
      {"--model", true, false, "also inspect a Hugging Face model directory (exit status 1 if sao cannot use it)"},
      {"--device-memory", true, false,
       "with --model: GiB one learner rank may use, for the memory advice (default: this machine's available memory)"},
      {"--batch-tokens", true, false,
       "with --model: padded tokens of one learner step, for the advice (default 65536)"},
      {"--lora-rank", true, false,
       "with --model: the advice for a LoRA policy of this rank on all 7 projections (model.lora; default: full)"},
      {"--help", false, false, "show this help"}};
  const auto parsed = parse_args("doctor", specs, args);
  if (parsed.has("--help")) {
    std::printf("usage: sao doctor [options]\n%s", flags_help(specs).c_str());
    return 0;
  }
  const int64_t threads = parsed.get_int("--threads", 2);
  if (threads < 1 || threads > 256) throw Error("--threads must be in [1, 256], got " + std::to_string(threads));
  report::configure_threads(threads);
  const auto blas = report::detect_blas();
  std::printf("sao %s\n", build_info::kVersion);
  std::printf("build type          %s\n", build_info::kBuildType);
  std::printf("compiler            %s\n", build_info::kCompiler);
  std::printf("libtorch            %s (built against %s)\n", TORCH_VERSION, build_info::kTorchVersion);
  std::printf("blas                %s\n", blas.name.c_str());
  std::printf("blas library        %s\n", blas.loaded_path.empty() ? "(none)" : blas.loaded_path.c_str());
  std::printf("openblas threads    %d\n", blas.openblas_threads);
  std::printf("allocator           %s\n", base::keep_freed_memory_for_reuse().c_str());
  // Casts: LibTorch 2.x returns size_t where 1.13 returned int.
  std::printf("torch threads       intra-op %d, inter-op %d\n", static_cast<int>(torch::get_num_threads()),
              static_cast<int>(torch::get_num_interop_threads()));
  std::printf("hardware threads    %u\n", std::thread::hardware_concurrency());
  std::printf("caf                 %s\n", build_info::kCafVersion);
  std::printf("cuda toolkit        %s\n", build_info::kCudaToolkitFound ? "found" : "not found");
  std::printf("nccl                %s\n", build_info::kNcclFound ? "found" : "not found");
  const auto cuda_devices = model::cuda_device_count();
  std::printf("cuda devices        %lld%s\n", static_cast<long long>(cuda_devices),
              cuda_devices > 0 ? " (learner.device, rollout.device, sft.device may be cuda[:N])"
                               : " (this LibTorch has no CUDA or no GPU is present: models run on the CPU)");
  std::string weight_sync = cuda_devices > 0 ? "device to device within a process" : "host bytes (no CUDA device)";
  weight_sync += build_info::kGpuTransports ? "; CUDA IPC and NCCL transports built (sao_gpu)"
                                            : "; CUDA IPC and NCCL transports not built (-DSAO_WITH_CUDA)";
  std::printf("gpu weight sync     %s\n", weight_sync.c_str());
  std::printf("plots               %s\n",
              build_info::kWithPlot ? "built (sao plot)" : "not built (-DSAO_WITH_PLOT=OFF)");
  std::printf("fp32 matmul 1024^2  %.1f GFLOP/s (measured now)\n", report::measure_matmul_gflops(1024, 5));
  if (!parsed.has("--model")) return 0;
  const auto model = config::inspect_model_directory(parsed.get("--model"));
  std::printf("\nmodel directory        %s\n", model.directory.c_str());
  for (const auto& part : model.parts) {
    std::printf("%-22s %s\n", part.name.c_str(), part.usable ? "ok" : "NOT USABLE");
    for (const auto& line : part.lines) std::printf("  %s\n", line.c_str());
  }
  std::printf("verdict                %s\n", model.usable()
                                                 ? "every part above is readable by sao: use it with --model DIR"
                                                 : "sao cannot use this directory (see the errors above)");
  const bool architecture_known = std::any_of(model.parts.begin(), model.parts.end(), [](const auto& part) {
    return part.name == "config.json" && part.usable;
  });
  if (!architecture_known) return 1;
  // What one learner rank needs (fp32, SAO: policy and critic), and which
  // of the learner's memory switches make it fit.
  const auto config_path = (std::filesystem::path(model.directory) / "config.json").string();
  auto architecture = model::model_config_from_json(
      base::parse_json_limited(model::read_regular_file(config_path, 16u << 20), config_path), config_path,
      model::ConfigKind::kHuggingFace);
  const int64_t batch_tokens = parsed.get_int("--batch-tokens", 65536);
  if (batch_tokens < 1 || batch_tokens > (int64_t{1} << 30)) {
    throw Error("--batch-tokens must be in [1, 2^30], got " + std::to_string(batch_tokens));
  }
  if (parsed.has("--lora-rank")) {
    architecture.lora.rank = parsed.get_int("--lora-rank", 0);
    if (architecture.lora.rank < 1 || architecture.lora.rank > model::kMaxLoraRank)
      throw Error("--lora-rank must be in [1, " + std::to_string(model::kMaxLoraRank) + "], got " +
                  std::to_string(architecture.lora.rank));
  }
  int64_t device_bytes = train::available_memory_bytes();
  if (parsed.has("--device-memory")) {
    const double gib = parsed.get_double("--device-memory", 0.0);
    if (!(gib > 0.0) || gib > 1e6) throw Error("--device-memory must be a number of GiB in (0, 1e6]");
    device_bytes = static_cast<int64_t>(gib * 1024.0 * 1024.0 * 1024.0);
  }
  std::printf("\nlearner memory per rank, SAO (policy%s + critic, fp32), a step of %lld padded tokens:\n",
              architecture.lora.enabled()
                  ? (" with LoRA r=" + std::to_string(architecture.lora.rank) + " (frozen base)").c_str()
                  : "",
              static_cast<long long>(batch_tokens));
  for (const auto& line : train::learner_memory_advice(architecture, /*critic=*/true, batch_tokens, device_bytes)) {
    std::printf("  %s\n", line.c_str());
  }
  return model.usable() ? 0 : 1;
}

}  // namespace sao::cli
