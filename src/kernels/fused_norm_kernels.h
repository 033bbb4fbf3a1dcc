#pragma once
// The raw-pointer seam between the fused-norm dispatcher (fused_norm.cpp, which owns tensors,
// shapes and dtypes) and its two backends: the CPU loops (fused_norm_cpu.cpp) and the CUDA
// kernels (fused_norm.cu). Plain structs and no LibTorch so nvcc compiles the kernels without
// the LibTorch headers. All row tensors are contiguous [rows, d] in `dtype`, except a norm's
// output and its gradient, which are in `out_dtype`: the input's, or float32 for a half input
// (a LayerNorm under autocast returns float32, as CUDA autocast's layer_norm does); per-row and
// per-column tensors (w, r, dw, partial sums) are in the accumulation type: float, or double
// for Float64. Weights are never null where a norm is on: an unweighted norm gets ones, so
// the element loops have no branches. Its weight gradient and partial sums are null: nothing
// is summed for it, and a backward with no weight gradient at all needs no row groups (on
// CUDA it then runs one block per row, which short rows such as per-head norms need to fill
// the GPU).
#include <cstdint>

#include "dtype.h"

struct CUstream_st;  // cudaStream_t without <cuda_runtime.h>

namespace siamese::kernels {

// RMSNorm, or LayerNorm (without its bias) when centered.
struct NormForwardArgs {
  DType dtype, out_dtype;
  int64_t rows, d;
  double eps;
  bool centered;
  const void* x;
  const void* w;
  void* y;
  void* r;   // rsqrt(mean((x - mu)^2) + eps) per row
  void* mu;  // the row means when centered, else null
};

struct NormBackwardArgs {
  DType dtype, out_dtype;  // of x and dx; of dy
  int64_t rows, d;
  bool centered;
  const void* x;
  const void* r;
  const void* mu;  // null unless centered
  const void* w;
  const void* dy;
  void* dx;
  void* dw;          // null: no weight of its own
  void* dw_partial;  // [parts, d], see weight_grad_parts; null with dw
};

// One stream's optional norm inside the stream update: RMSNorm, or LayerNorm when centered
// (the row's mean subtracted before its variance and scale are taken).
struct StreamNorm {
  bool on = false;
  bool centered = false;
  double eps = 0;
  const void* w = nullptr;
  void* n = nullptr;         // forward: the normalized stream
  void* r = nullptr;         // forward: written; backward: read
  void* mu = nullptr;        // the row means when centered, written and read as r
  const void* dn = nullptr;  // backward: gradient of n, null = zero
  void* dw = nullptr;
  void* dw_partial = nullptr;
};

// X' = X + alpha o, Y' = Y + o, then the norms of X' and Y' that are on.
struct StreamForwardArgs {
  DType dtype;
  int64_t rows, d;
  double alpha;
  const void *x, *y, *o;  // y null: one stream (y_out null, ny off)
  void *x_out, *y_out;
  StreamNorm nx, ny;
};

struct StreamBackwardArgs {
  DType dtype;
  int64_t rows, d;
  double alpha;
  const void *x_out, *y_out;    // the forward's outputs X', Y'
  const void *dx_out, *dy_out;  // gradients of X', Y'; null = zero
  void *dx, *dy, *d_o;          // dy null: one stream (y_out, dy_out null, ny off); d_o null: dx is it
  StreamNorm nx, ny;
};

// The type of a norm's output and its gradient: the input's, or float32 (the stream update's
// are the streams').
inline DType out_dtype(const NormForwardArgs& a) { return a.out_dtype; }
inline DType out_dtype(const NormBackwardArgs& a) { return a.out_dtype; }
inline DType out_dtype(const StreamForwardArgs& a) { return a.dtype; }
inline DType out_dtype(const StreamBackwardArgs& a) { return a.dtype; }

// The weight gradient is summed in fixed order within groups of consecutive rows, then over
// the groups per column, with no atomics: the grouping depends only on the row count and the
// device kind, so dw is the same bit for bit from run to run.
inline int64_t rows_per_part(int64_t rows, bool cuda) {
  const int64_t most_parts = cuda ? 1024 : 64;  // CUDA: enough blocks to fill the GPU
  return rows <= 0 ? 1 : (rows + most_parts - 1) / most_parts;
}
inline int64_t weight_grad_parts(int64_t rows, bool cuda) {
  const int64_t per = rows_per_part(rows, cuda);
  return (rows + per - 1) / per;
}

// One overload per operation, so the dispatcher launches any of them the same way.
void run_cpu(const NormForwardArgs& a);
void run_cpu(const NormBackwardArgs& a);
void run_cpu(const StreamForwardArgs& a);
void run_cpu(const StreamBackwardArgs& a);

// Enqueue on `stream`; each returns null on success, else the CUDA error's text.
const char* run_cuda(const NormForwardArgs& a, CUstream_st* stream);
const char* run_cuda(const NormBackwardArgs& a, CUstream_st* stream);
const char* run_cuda(const StreamForwardArgs& a, CUstream_st* stream);
const char* run_cuda(const StreamBackwardArgs& a, CUstream_st* stream);

}  // namespace siamese::kernels
