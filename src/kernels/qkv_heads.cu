// CUDA backend of the attention's head preparation (qkv_heads_kernel.h): one warp per head
// row, each lane holding E = hd / 32 adjacent values in registers. The norm's sums are warp
// shuffles; RoPE pairs value i with i + hd / 2, which sits E * 16 values on, in the lane 16
// away, so the pair meets through one shuffle. Each row is read once and written once, in
// the layout the attention reads: the norms' and RoPE's separate passes, their float32 copies
// under autocast, and backward's concatenation of the q, k and v gradients are gone.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "fused_norm_math.h"
#include "qkv_heads_kernel.h"
#include "qkv_heads_math.h"

namespace siamese::kernels {
namespace {

using row_math::narrow;
using row_math::widen;

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = 8;
constexpr int64_t kMaxGrid = int64_t(1) << 20;

struct DeviceRsqrt {
  __device__ float operator()(float v) const { return rsqrtf(v); }
};

__device__ inline float warp_sum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Normalizes the row's E values per lane in place; returns r (1 without a norm).
template <int E>
__device__ float normalize(float (&u)[E], const QkvHeadsArgs& a, bool norm) {
  if (!norm) return 1.0f;
  const int hd = static_cast<int>(a.hd);
  float sum = 0.0f;
#pragma unroll
  for (int e = 0; e < E; ++e) sum += u[e];
  const float mu = qkv_math::mean_of(warp_sum(sum), hd, a.centered);
  float sq = 0.0f;
#pragma unroll
  for (int e = 0; e < E; ++e) sq += (u[e] - mu) * (u[e] - mu);
  const float r = qkv_math::rstd_of(warp_sum(sq), hd, a.eps, DeviceRsqrt{});
#pragma unroll
  for (int e = 0; e < E; ++e) u[e] = (u[e] - mu) * r;
  return r;
}

// RoPE on the row: lanes 0-15 hold the first half, lanes 16-31 the second.
template <int E>
__device__ void rotate(float (&u)[E], const QkvHeadsArgs& a, int64_t t, float sign) {
  const int lane = threadIdx.x % kWarp;
  const bool first = lane < kWarp / 2;
  const int64_t h = a.hd / 2;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const float partner = __shfl_xor_sync(0xffffffffu, u[e], kWarp / 2);
    const int64_t i = (lane % (kWarp / 2)) * E + e;
    const float c = a.cos[t * h + i], s = a.sin[t * h + i];
    u[e] = first ? qkv_math::rotate(u[e], partner, c, s, sign).first
                 : qkv_math::rotate(partner, u[e], c, s, sign).second;
  }
}

// body(r, row, lane) for every head row r a warp of this grid takes, grid-striding.
template <typename Body>
__device__ void each_head_row(const QkvHeadsArgs& a, Body body) {
  const int lane = threadIdx.x % kWarp;
  const int64_t rows = a.B * a.T * (a.heads + 2 * a.kv_heads);
  const int64_t warps = int64_t(gridDim.x) * kWarpsPerBlock;
  for (int64_t r = blockIdx.x * int64_t(kWarpsPerBlock) + threadIdx.x / kWarp; r < rows; r += warps)
    body(r, head_row(a, r), lane);
}

template <typename T, int E>
__device__ void load(const T* p, float (&v)[E]) {
#pragma unroll
  for (int e = 0; e < E; ++e) v[e] = widen(p[e]);
}

template <typename T, int E>
__device__ void store(T* p, const float (&v)[E]) {
#pragma unroll
  for (int e = 0; e < E; ++e) p[e] = narrow<T>(v[e]);
}

template <typename T, int E>
__global__ void forward_kernel(QkvHeadsArgs a) {
  each_head_row(a, [&](int64_t r, const HeadRow& row, int lane) {
    float u[E];
    load(static_cast<const T*>(a.qkv) + r * a.hd + lane * E, u);
    normalize(u, a, a.norm[row.part]);
    if (a.rope && row.part < 2) rotate(u, a, row.t, 1.0f);
    const int64_t heads = row.part == 0 ? a.heads : a.kv_heads;
    store(static_cast<T*>(a.out[row.part]) + ((row.b * a.T + row.t) * heads + row.head) * a.hd + lane * E, u);
  });
}

template <typename T, int E>
__global__ void backward_kernel(QkvHeadsArgs a) {
  each_head_row(a, [&](int64_t r, const HeadRow& row, int lane) {
    const int64_t* s = a.grad_stride[row.part];
    float du[E];
    load(static_cast<const T*>(a.grad[row.part]) + row.b * s[0] + row.head * s[1] + row.t * s[2] + lane * E,
         du);
    if (a.rope && row.part < 2) rotate(du, a, row.t, -1.0f);
    if (a.norm[row.part]) {
      float u[E];
      load(static_cast<const T*>(a.qkv) + r * a.hd + lane * E, u);
      const float rstd = normalize(u, a, true);
      float sum_du = 0.0f, sum_du_u = 0.0f;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        sum_du += du[e];
        sum_du_u += du[e] * u[e];
      }
      const float n = float(a.hd), mean_du = warp_sum(sum_du) / n, mean_du_u = warp_sum(sum_du_u) / n;
#pragma unroll
      for (int e = 0; e < E; ++e)
        du[e] = qkv_math::norm_grad(du[e], u[e], rstd, mean_du, mean_du_u, a.centered);
    }
    store(static_cast<T*>(a.dqkv) + r * a.hd + lane * E, du);
  });
}

template <bool kBackward, typename T, int E>
void launch_e(const QkvHeadsArgs& a, int grid, cudaStream_t stream) {
  if constexpr (kBackward)
    backward_kernel<T, E><<<grid, kWarp * kWarpsPerBlock, 0, stream>>>(a);
  else
    forward_kernel<T, E><<<grid, kWarp * kWarpsPerBlock, 0, stream>>>(a);
}

// E is a template constant so that each lane's values stay in registers.
template <bool kBackward, typename T>
const char* launch(const QkvHeadsArgs& a, cudaStream_t stream) {
  const int64_t rows = a.B * a.T * (a.heads + 2 * a.kv_heads);
  const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const int grid = static_cast<int>(blocks < kMaxGrid ? blocks : kMaxGrid);
  switch (a.hd) {
    case 32:
      launch_e<kBackward, T, 1>(a, grid, stream);
      break;
    case 64:
      launch_e<kBackward, T, 2>(a, grid, stream);
      break;
    case 128:
      launch_e<kBackward, T, 4>(a, grid, stream);
      break;
    case 256:
      launch_e<kBackward, T, 8>(a, grid, stream);
      break;
    default:
      return "qkv heads kernel: head_dim must be 32, 64, 128 or 256";
  }
  return nullptr;
}

template <bool kBackward>
const char* run(const QkvHeadsArgs& a, cudaStream_t stream) {
  if (a.B * a.T == 0) return nullptr;
  const char* err = nullptr;
  switch (a.dtype) {
    case DType::Float32:
      err = launch<kBackward, float>(a, stream);
      break;
    case DType::BFloat16:
      err = launch<kBackward, __nv_bfloat16>(a, stream);
      break;
    case DType::Float16:
      err = launch<kBackward, __half>(a, stream);
      break;
    default:
      return "qkv heads kernel: unsupported dtype on CUDA";
  }
  if (err) return err;
  const cudaError_t cuda_err = cudaGetLastError();
  return cuda_err == cudaSuccess ? nullptr : cudaGetErrorString(cuda_err);
}

}  // namespace

const char* qkv_heads_forward_cuda(const QkvHeadsArgs& a, CUstream_st* stream) {
  return run<false>(a, stream);
}

const char* qkv_heads_backward_cuda(const QkvHeadsArgs& a, CUstream_st* stream) {
  return run<true>(a, stream);
}

}  // namespace siamese::kernels
