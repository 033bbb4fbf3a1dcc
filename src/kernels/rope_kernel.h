#pragma once
// The raw-pointer seam between rope.cpp (kernels::rope_rotate) and the CUDA kernel
// (rope_kernel.cu) that rotates q or k in one pass: reads t in its storage dtype, rotates in
// float32 with float32 angle tables, writes the result in t's dtype. It replaces, on CUDA, the
// cast to float32, four float32 passes and the cast back (bench --profile on an H100: 8% of an
// OLMo-1B step). Plain structs and no LibTorch, so nvcc compiles the kernel without the
// LibTorch headers.
#include <cstdint>

#include "dtype.h"

struct CUstream_st;  // cudaStream_t without <cuda_runtime.h>

namespace siamese::kernels {

// dtype: Float32, BFloat16 or Float16. t: [B, H, T, 2 * half] with any strides for B, H and
// T and unit stride along the last dimension; out: contiguous, same shape and dtype. Tables:
// float32 sin and cos at [b * table_batch_stride + t * half + i] (table_batch_stride 0: one
// table for every row). sign -1 rotates by the negative angles (the backward).
struct RopeArgs {
  DType dtype;
  int64_t B, H, T, half;
  int64_t stride_b, stride_h, stride_t;
  int64_t table_batch_stride;
  float sign;
  const void* t;
  const float* sin;
  const float* cos;
  void* out;
};

// Enqueues on `stream`; null on success, else the CUDA error's text.
const char* run_cuda(const RopeArgs& a, CUstream_st* stream);

}  // namespace siamese::kernels
