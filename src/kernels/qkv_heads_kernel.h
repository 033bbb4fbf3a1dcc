#pragma once
// The raw-pointer seam between qkv_heads.cpp (kernels/qkv_heads.h) and its backends: the
// CUDA kernels (qkv_heads.cu) and the CPU loop (qkv_heads_cpu.cpp), both over
// qkv_heads_math.h. Plain structs and no LibTorch, so nvcc compiles the kernels without the
// LibTorch headers.
#include <cstdint>

#include "dtype.h"
#include "host_device.h"

struct CUstream_st;  // cudaStream_t without <cuda_runtime.h>

namespace siamese::kernels {

// A head row is hd values of q (part 0), k (1) or v (2) for one token and head. dtype is
// every tensor's but the float32 tables: Float32, BFloat16 or Float16 (CUDA), Float32 or
// BFloat16 (CPU).
struct QkvHeadsArgs {
  DType dtype;
  int64_t B, T, heads, kv_heads, hd;
  bool norm[3];   // the part's rows are normalized, without weights
  bool centered;  // LayerNorm; else RMSNorm
  float eps;
  bool rope;  // q and k rotated by sin, cos: float32 [T, hd / 2]
  const float* sin;
  const float* cos;
  const void* qkv;  // [B, T, (heads + 2 kv_heads) hd], contiguous
  // Forward: q [B, T, heads, hd], k and v [B, T, kv_heads, hd], contiguous.
  void* out[3];
  // Backward: the parts' gradients [B, heads or kv_heads, T, hd] at strides (b, h, t) with a
  // unit last stride, and dqkv laid out as qkv.
  const void* grad[3];
  int64_t grad_stride[3][3];
  void* dqkv;
};

// Enqueue on `stream`; null on success, else the CUDA error's text.
const char* qkv_heads_forward_cuda(const QkvHeadsArgs& a, CUstream_st* stream);
const char* qkv_heads_backward_cuda(const QkvHeadsArgs& a, CUstream_st* stream);

void qkv_heads_forward_cpu(const QkvHeadsArgs& a);
void qkv_heads_backward_cpu(const QkvHeadsArgs& a);

// Where row r (of B * T * (heads + 2 kv_heads)) lives: its token, part and head. Its values in
// qkv (and dqkv) start at r * hd.
struct HeadRow {
  int64_t b, t, part, head;
};
SIAMESE_HD inline HeadRow head_row(const QkvHeadsArgs& a, int64_t r) {
  const int64_t per_token = a.heads + 2 * a.kv_heads;
  const int64_t j = r % per_token, token = r / per_token;
  const int64_t part = j < a.heads ? 0 : j < a.heads + a.kv_heads ? 1 : 2;
  const int64_t head = part == 0 ? j : part == 1 ? j - a.heads : j - a.heads - a.kv_heads;
  return {token / a.T, token % a.T, part, head};
}

}  // namespace siamese::kernels
