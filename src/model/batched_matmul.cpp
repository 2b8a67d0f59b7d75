// See batched_matmul.hpp for why.
#include "model/batched_matmul.hpp"

#include "base/error.hpp"

#include <torch/autograd.h>

#include <dlfcn.h>

#include <algorithm>
#include <limits>
#include <string>

namespace sao::model {

namespace {

// The CBLAS ABI (cblas.h): row-major = 101, no transpose = 111, transpose = 112.
constexpr int kRowMajor = 101;
constexpr int kNoTrans = 111;
constexpr int kTrans = 112;
using CblasSgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*,
                            int);

// LibTorch already loaded the BLAS it multiplies with; this takes the same
// library's sgemm, so both paths run the same kernels.
CblasSgemm cblas_sgemm_function() {
  static const auto function = reinterpret_cast<CblasSgemm>(dlsym(RTLD_DEFAULT, "cblas_sgemm"));
  return function;
}

// A [N, R, C] view as BLAS sees each matrix: row-major with leading
// dimension `leading`, or the transpose of a row-major matrix.
struct MatrixLayout {
  torch::Tensor storage;  // keeps the data alive (a copy when the view was not BLAS-shaped)
  int transpose = kNoTrans;
  int64_t leading = 0;
  int64_t batch_stride = 0;
};

bool fits_int(int64_t value) {
  return value <= std::numeric_limits<int>::max();
}

MatrixLayout layout_of(const torch::Tensor& t) {
  const int64_t rows = t.size(1), cols = t.size(2);
  const int64_t row_stride = t.stride(1), col_stride = t.stride(2);
  if (col_stride == 1 && row_stride >= std::max<int64_t>(cols, 1) && fits_int(row_stride)) {
    return {t, kNoTrans, row_stride, t.stride(0)};
  }
  if (row_stride == 1 && col_stride >= std::max<int64_t>(rows, 1) && fits_int(col_stride)) {
    return {t, kTrans, col_stride, t.stride(0)};
  }
  auto contiguous = t.contiguous();
  return {contiguous, kNoTrans, std::max<int64_t>(cols, 1), contiguous.stride(0)};
}

// a [N, M, K] @ b [N, K, P] into a fresh [N, M, P], no autograd.
torch::Tensor sgemm_batch(const torch::Tensor& a, const torch::Tensor& b) {
  const int64_t batch = a.size(0), m = a.size(1), k = a.size(2), p = b.size(2);
  auto out = torch::empty({batch, m, p}, a.options());
  if (batch == 0 || m == 0 || p == 0) return out;
  if (k == 0) return out.zero_();
  const auto left = layout_of(a);
  const auto right = layout_of(b);
  const float* left_data = left.storage.data_ptr<float>();
  const float* right_data = right.storage.data_ptr<float>();
  float* out_data = out.data_ptr<float>();
  const auto sgemm = cblas_sgemm_function();
  for (int64_t n = 0; n < batch; ++n) {
    sgemm(kRowMajor, left.transpose, right.transpose, static_cast<int>(m), static_cast<int>(p), static_cast<int>(k),
          1.0F, left_data + n * left.batch_stride, static_cast<int>(left.leading), right_data + n * right.batch_stride,
          static_cast<int>(right.leading), 0.0F, out_data + n * m * p, static_cast<int>(p));
  }
  return out;
}

class BatchedMatmulFunction : public torch::autograd::Function<BatchedMatmulFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* context, const torch::Tensor& a,
                               const torch::Tensor& b) {
    context->save_for_backward({a, b});
    return sgemm_batch(a, b);
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* context,
                                               torch::autograd::tensor_list grad_outputs) {
    const auto saved = context->get_saved_variables();
    const auto& a = saved[0];
    const auto& b = saved[1];
    const auto& grad = grad_outputs[0];
    torch::Tensor grad_a, grad_b;
    // d(a b)/da = grad b^T, d(a b)/db = a^T grad: transposed views, which
    // layout_of hands to BLAS as transpose flags without copying.
    if (context->needs_input_grad(0)) grad_a = sgemm_batch(grad, b.transpose(1, 2));
    if (context->needs_input_grad(1)) grad_b = sgemm_batch(a.transpose(1, 2), grad);
    return {grad_a, grad_b};
  }
};

}  // namespace

torch::Tensor batched_matmul(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.dim() < 3 || a.dim() != b.dim()) {
    throw Error("batched_matmul: need two tensors of the same rank >= 3, got " + std::to_string(a.dim()) + " and " +
                std::to_string(b.dim()));
  }
  const auto leading = a.sizes().slice(0, a.dim() - 2);
  if (leading != b.sizes().slice(0, b.dim() - 2) || a.size(-1) != b.size(-2)) {
    throw Error("batched_matmul: shapes " + c10::str(a.sizes()) + " and " + c10::str(b.sizes()) + " do not multiply");
  }
  const bool blas_path = cblas_sgemm_function() != nullptr && a.device().is_cpu() && b.device().is_cpu() &&
                         a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32 &&
                         fits_int(a.size(-2)) && fits_int(a.size(-1)) && fits_int(b.size(-1));
  if (!blas_path) return torch::matmul(a, b);
  const int64_t m = a.size(-2), k = a.size(-1), p = b.size(-1);
  int64_t batch = 1;
  for (const int64_t size : leading) batch *= size;
  auto out = BatchedMatmulFunction::apply(a.reshape({batch, m, k}), b.reshape({batch, k, p}));
  auto out_sizes = a.sizes().vec();
  out_sizes.back() = p;
  return out.view(out_sizes);
}

}  // namespace sao::model
