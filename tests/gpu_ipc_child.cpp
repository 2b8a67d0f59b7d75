// The importing side of a CUDA IPC transfer, as its own process (CUDA
// refuses to open a handle in the process that exported it). Opens the
// handle, copies the whole buffer device to device into its own memory,
// waits, writes the bytes to OUT_FILE and prints the time of each part.
// Used by tests/test_gpu_device_transport.cpp and bench/bench_gpu.cpp.
//
//   sao_gpu_ipc_child HANDLE_TEXT OUT_FILE|-
#include "base/error.hpp"
#include "gpu/cuda_ipc.hpp"
#include "model/device.hpp"

#include <chrono>
#include <cstdio>
#include <fstream>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: sao_gpu_ipc_child HANDLE_TEXT OUT_FILE|-\n");
    return 2;
  }
  try {
    const torch::Device gpu(torch::kCUDA, 0);
    const auto handle = sao::gpu::ipc_handle_from_hex(argv[1]);
    torch::empty({1}, torch::dtype(torch::kUInt8).device(gpu));  // CUDA context up before timing
    sao::model::synchronize(gpu);
    const auto start = std::chrono::steady_clock::now();
    sao::gpu::IpcImport imported(handle, {}, gpu);
    const auto opened = std::chrono::steady_clock::now();
    auto copy = imported.packed().buffer.clone();
    sao::model::synchronize(gpu);
    const auto copied = std::chrono::steady_clock::now();
    const auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
    std::printf("ipc_open_ms %.3f ipc_copy_ms %.3f bytes %llu\n", ms(start, opened), ms(opened, copied),
                static_cast<unsigned long long>(handle.size));
    if (std::string(argv[2]) != "-") {
      auto host = copy.to(torch::kCPU).contiguous();
      std::ofstream out(argv[2], std::ios::binary);
      out.write(static_cast<const char*>(host.data_ptr()), static_cast<std::streamsize>(host.numel()));
      if (!out) throw sao::Error(std::string("cannot write ") + argv[2]);
    }
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "sao_gpu_ipc_child: %s\n", error.what());
    return 1;
  }
}
