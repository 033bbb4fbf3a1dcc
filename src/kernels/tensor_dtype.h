#pragma once
// What the element-wise passes' dispatchers (swiglu.cpp, cross_entropy.cpp, qkv_heads.cpp)
// share: the seam's name for a tensor's dtype (which dtypes have a pass: families.h).
#include <torch/torch.h>

#include "dtype.h"

namespace siamese::kernels {

// For a tensor a family takes (families.h: float32, bfloat16, float16).
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
