#pragma once
// The raw-pointer seam between swiglu.cpp (kernels::swiglu) and the CUDA kernels
// (swiglu.cu): SwiGLU forward as one pass that reads h = [a | b] and writes a silu(b), and
// backward as one pass that reads h and g and writes [da | db], with swiglu_math.h's float
// arithmetic. On an H100 LibTorch's form took a silu and a product forward, a silu_backward,
// two products and the concatenation of the halves' gradients backward: 18 passes of the
// inner width where these take 8. Plain structs and no LibTorch, so nvcc compiles the kernels
// without the LibTorch headers.
#include <cstdint>

#include "dtype.h"

struct CUstream_st;  // cudaStream_t without <cuda_runtime.h>

namespace siamese::kernels {

// dtype: Float32, BFloat16 or Float16; every buffer contiguous in it. h: [rows, 2n]; g:
// [rows, n] (backward only); out: [rows, n] forward, [rows, 2n] backward.
struct SwigluArgs {
  DType dtype;
  int64_t rows, n;
  const void* h;
  const void* g;
  void* out;
};

// Enqueue on `stream`; null on success, else the CUDA error's text.
const char* swiglu_forward_cuda(const SwigluArgs& a, CUstream_st* stream);
const char* swiglu_backward_cuda(const SwigluArgs& a, CUstream_st* stream);

}  // namespace siamese::kernels
