// Batched matrix product for the many small matrices of attention.
#pragma once

#include <torch/types.h>

namespace sao::model {

// a [..., M, K] @ b [..., K, P] -> [..., M, P] (same leading dims), with
// autograd. LibTorch 1.13's CPU bmm runs a batch of small matrices as a loop
// that selects three sub-tensors and dispatches a full addmm per matrix;
// attention over short sequences (B * heads matrices of 16 x 32) spent most
// of its time there, not in arithmetic. This calls the BLAS sgemm directly
// per matrix on raw pointers, forward and backward. Other dtypes and devices,
// or a BLAS without cblas_sgemm, go to torch::matmul.
torch::Tensor batched_matmul(const torch::Tensor& a, const torch::Tensor& b);

}  // namespace sao::model
