#pragma once
// What the element-wise passes' dispatchers (swiglu.cpp, cross_entropy.cpp) share: which
// devices and dtypes have a pass, and the seam's name for a tensor's dtype.
#include <torch/torch.h>

#include "dtype.h"

namespace siamese::kernels {

// The CPU loops cover float32 and bfloat16; the CUDA kernels also float16.
inline bool has_pass_for(const torch::Tensor& t) {
  const auto s = t.scalar_type();
  if (t.is_cpu()) return s == torch::kFloat || s == torch::kBFloat16;
  return t.is_cuda() && (s == torch::kFloat || s == torch::kBFloat16 || s == torch::kHalf);
}

// For a tensor has_pass_for accepts.
inline DType pass_dtype(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat:
      return DType::Float32;
    case torch::kBFloat16:
      return DType::BFloat16;
    default:
      return DType::Float16;
  }
}

}  // namespace siamese::kernels
