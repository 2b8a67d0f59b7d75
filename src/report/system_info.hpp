// What the process is actually running on: which BLAS library got loaded
// (Debian's reference BLAS is 20-40x slower than OpenBLAS for LibTorch
// matmuls), thread counts, and a measured matmul rate that benchmarks use as
// "the limit of this machine".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sao::report {

struct BlasInfo {
  std::string loaded_path;    // real path of the loaded libblas/libopenblas
  std::string name;           // "OpenBLAS (pthread)", "reference BLAS", ...
  int openblas_threads = -1;  // -1 when not OpenBLAS
};

BlasInfo detect_blas();
// Applies the thread plan: LibTorch intra-op threads, and OpenBLAS's own
// pool set to the same number (it otherwise sizes itself to every core).
void configure_threads(int64_t intra_op_threads);
// fp32 square matmul rate in GFLOP/s, best of `repeats` after a warm-up.
double measure_matmul_gflops(int64_t n, int repeats);
std::vector<std::string> loaded_shared_libraries();
// "HOST-PID" ("node-PID" when the host has no name): what names this
// process where nothing else does (a local run's node, a cluster node's
// default name).
std::string host_process_name();

}  // namespace sao::report
