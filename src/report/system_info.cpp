// BLAS detection, thread plan and matmul limit; see system_info.hpp.
#include "report/system_info.hpp"

#include <unistd.h>

#include <dlfcn.h>
#include <link.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>

namespace sao::report {

namespace {
int collect_library(struct dl_phdr_info* info, size_t, void* data) {
  auto* paths = static_cast<std::vector<std::string>*>(data);
  if (info->dlpi_name != nullptr && info->dlpi_name[0] != '\0') paths->emplace_back(info->dlpi_name);
  return 0;
}

std::string real_path(const std::string& path) {
  char buffer[PATH_MAX];
  return realpath(path.c_str(), buffer) != nullptr ? std::string(buffer) : path;
}

bool contains(const std::string& text, const char* needle) {
  return text.find(needle) != std::string::npos;
}
}  // namespace

std::vector<std::string> loaded_shared_libraries() {
  std::vector<std::string> paths;
  dl_iterate_phdr(collect_library, &paths);
  return paths;
}

BlasInfo detect_blas() {
  BlasInfo info;
  for (const auto& path : loaded_shared_libraries()) {
    const std::string resolved = real_path(path);
    if (contains(resolved, "blas") && !contains(resolved, "cublas")) {
      info.loaded_path = resolved;
      break;
    }
  }
  using GetThreads = int (*)();
  auto* openblas_get_num_threads = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  if (openblas_get_num_threads != nullptr) info.openblas_threads = openblas_get_num_threads();
  if (contains(info.loaded_path, "openblas")) {
    info.name = contains(info.loaded_path, "pthread")  ? "OpenBLAS (pthread)"
                : contains(info.loaded_path, "openmp") ? "OpenBLAS (OpenMP)"
                                                       : "OpenBLAS";
  } else if (contains(info.loaded_path, "blas/libblas")) {
    info.name = "reference BLAS (slow: apt-get install libopenblas0-pthread)";
  } else if (contains(info.loaded_path, "mkl")) {
    info.name = "Intel MKL";
  } else if (info.loaded_path.empty()) {
    info.name = "none loaded (LibTorch uses its own kernels)";
  } else {
    info.name = "unknown";
  }
  return info;
}

void configure_threads(int64_t intra_op_threads) {
  torch::set_num_threads(static_cast<int>(intra_op_threads));
  using SetThreads = void (*)(int);
  auto* openblas_set_num_threads = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (openblas_set_num_threads != nullptr) openblas_set_num_threads(static_cast<int>(intra_op_threads));
}

double measure_matmul_gflops(int64_t n, int repeats) {
  torch::NoGradGuard no_grad;
  auto a = torch::randn({n, n});
  auto b = torch::randn({n, n});
  auto c = torch::matmul(a, b);  // warm-up: thread pools, page faults
  double best_seconds = 1e30;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    c = torch::matmul(a, b);
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    best_seconds = std::min(best_seconds, elapsed.count());
  }
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / best_seconds / 1e9;
}

std::string host_process_name() {
  char host[256] = {0};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  return std::string(host[0] != '\0' ? host : "node") + "-" + std::to_string(::getpid());
}

}  // namespace sao::report
