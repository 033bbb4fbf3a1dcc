// CUDA backend of the fused norms and SiameseNorm stream update (fused_norm_kernels.h):
// one row per block, the row maths of fused_norm_math.h, float accumulation, row sums
// across the block in a fixed order. The weight gradient is summed per row group (one block
// each) and then per column by a second kernel: no atomics, so it is reproducible.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <initializer_list>
#include <utility>

#include "fused_norm_kernels.h"
#include "fused_norm_math.h"

namespace siamese::kernels {
namespace {

using namespace row_math;

constexpr int kWarp = 32;
constexpr int kMaxThreads = 1024;
constexpr int64_t kMaxGrid = 1 << 16;  // row-parallel grids loop over further rows

// About four elements per thread: enough work per thread to pay for the row sum's
// barriers, few enough that a large row still fills many warps.
int threads_for(int64_t d) {
  int64_t t = (d + 3) / 4;
  t = (t + kWarp - 1) / kWarp * kWarp;
  return static_cast<int>(t < kWarp ? kWarp : t > kMaxThreads ? kMaxThreads : t);
}

// Replaces each v[k] by its sum over the block (blockDim.x a multiple of 32). Every thread
// adds the warp totals in the same order, so all get the same bits, run after run.
struct BlockSum {
  template <int K>
  __device__ void operator()(float (&v)[K]) const {
    __shared__ float warp_sums[K][kMaxThreads / kWarp];
    for (int k = 0; k < K; ++k)
      for (int offset = kWarp / 2; offset > 0; offset /= 2)
        v[k] += __shfl_xor_sync(0xffffffffu, v[k], offset);
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    if (lane == 0)
      for (int k = 0; k < K; ++k) warp_sums[k][warp] = v[k];
    __syncthreads();
    for (int k = 0; k < K; ++k) {
      float s = 0;
      for (int w = 0; w < static_cast<int>(blockDim.x) / kWarp; ++w) s += warp_sums[k][w];
      v[k] = s;
    }
    __syncthreads();  // warp_sums is rewritten for the next row
  }
};

template <typename T, typename U, typename Args>
__global__ void forward_kernel(Args a) {
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x)
    forward_row<1, float, T, U>(a, row, threadIdx.x, blockDim.x, BlockSum{});
}

template <typename T, typename U, typename Args>
__global__ void backward_kernel(Args a, int64_t rows_per) {
  backward_part<1, float, T, U>(a, blockIdx.x, rows_per, threadIdx.x, blockDim.x, BlockSum{});
}

__global__ void sum_parts_kernel(const void* partial, int64_t parts, int64_t d, void* dw) {
  sum_parts<float>(partial, parts, d, dw, blockIdx.x * int64_t(blockDim.x) + threadIdx.x,
                   int64_t(gridDim.x) * blockDim.x);
}

// Runs launch(T{}) for the storage type of `dtype`; the launch's error, if any.
template <typename Launch>
const char* by_dtype(DType dtype, Launch launch) {
  switch (dtype) {
    case DType::Float32:
      launch(float{});
      break;
    case DType::BFloat16:
      launch(__nv_bfloat16{});
      break;
    case DType::Float16:
      launch(__half{});
      break;
    default:
      return "fused norm kernels: unsupported dtype on CUDA";
  }
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

// Runs launch(T{}, U{}) for the input and output storage types of `a`.
template <typename Args, typename Launch>
const char* by_dtypes(const Args& a, Launch launch) {
  return by_dtype(a.dtype, [&](auto t) {
    if (out_dtype(a) == a.dtype)
      launch(t, t);
    else
      launch(t, float{});
  });
}

// One block per row (grid-striding beyond kMaxGrid rows).
template <typename Args>
const char* forward(const Args& a, cudaStream_t stream) {
  if (a.rows == 0) return nullptr;
  const int grid = static_cast<int>(a.rows < kMaxGrid ? a.rows : kMaxGrid);
  return by_dtypes(a, [&](auto t, auto u) {
    forward_kernel<decltype(t), decltype(u)><<<grid, threads_for(a.d), 0, stream>>>(a);
  });
}

// One block per row group, then each weight's partial sums (partial, dw) per column.
template <typename Args>
const char* backward(const Args& a, cudaStream_t stream,
                     std::initializer_list<std::pair<const void*, void*>> weights) {
  if (a.rows == 0) return nullptr;
  bool weight_grads = false;
  for (const auto& [partial, dw] : weights) weight_grads = weight_grads || partial;
  // Without weight gradients nothing is summed per group: one block per row.
  const int64_t rows_per = weight_grads ? rows_per_part(a.rows, /*cuda=*/true) : 1;
  const int64_t parts = (a.rows + rows_per - 1) / rows_per;
  if (const char* err = by_dtypes(a, [&](auto t, auto u) {
        backward_kernel<decltype(t), decltype(u)>
            <<<static_cast<int>(parts), threads_for(a.d), 0, stream>>>(a, rows_per);
      }))
    return err;
  for (const auto& [partial, dw] : weights) {
    if (!partial) continue;
    const int threads = 256;
    const int64_t blocks = (a.d + threads - 1) / threads;
    const int64_t grid = blocks < kMaxGrid ? blocks : kMaxGrid;
    sum_parts_kernel<<<grid, threads, 0, stream>>>(partial, parts, a.d, dw);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return cudaGetErrorString(err);
  }
  return nullptr;
}

}  // namespace

const char* run_cuda(const NormForwardArgs& a, CUstream_st* stream) { return forward(a, stream); }

const char* run_cuda(const StreamForwardArgs& a, CUstream_st* stream) { return forward(a, stream); }

const char* run_cuda(const NormBackwardArgs& a, CUstream_st* stream) {
  return backward(a, stream, {{a.dw_partial, a.dw}});
}

const char* run_cuda(const StreamBackwardArgs& a, CUstream_st* stream) {
  return backward(a, stream, {{a.nx.dw_partial, a.nx.dw}, {a.ny.dw_partial, a.ny.dw}});
}

}  // namespace siamese::kernels
