#pragma once
// The raw-pointer seam between cross_entropy.cpp (kernels/cross_entropy.h) and the CUDA
// kernels (softmax.cu): the cross-entropy's statistics in one read of the logits, and its
// gradient in one read and one write, with softmax_math.h's float arithmetic. They replace, on
// CUDA, the float32 copy of autocast's logits, log_softmax's float32 output kept for backward,
// and backward's zero fill, scatter, log_softmax backward and cast back. Plain structs and no
// LibTorch, so nvcc compiles the kernels without the LibTorch headers.
#include <cstdint>

#include "dtype.h"

struct CUstream_st;  // cudaStream_t without <cuda_runtime.h>

namespace siamese::kernels {

// dtype: Float32, BFloat16 or Float16, of x (and grad). x: [rows, vocab] contiguous; max,
// log_sum: float [rows]; row_scale: float, row i's at i * row_scale_stride; targets: int64
// [rows]; target_grad: one float. Every pointer is on the device.
struct SoftmaxArgs {
  DType dtype;
  int64_t rows, vocab;
  const void* x;
  float* max;
  float* log_sum;
  const float* row_scale;
  int64_t row_scale_stride;
  const int64_t* targets;
  const float* target_grad;
  void* grad;
};

// Enqueue on `stream`; null on success, else the CUDA error's text. The first writes max and
// log_sum; the second reads them and writes grad (which must not overlap x).
const char* log_softmax_stats_cuda(const SoftmaxArgs& a, CUstream_st* stream);
const char* cross_entropy_grad_cuda(const SoftmaxArgs& a, CUstream_st* stream);

}  // namespace siamese::kernels
