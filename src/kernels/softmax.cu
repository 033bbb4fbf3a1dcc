// CUDA backend of the cross-entropy's passes (softmax_kernel.h): one block per row (grid-
// striding over rows), each thread reading 16-byte packs of the row where the width allows.
// The statistics are one pass: each thread keeps the maximum and the rescaled sum of what it
// read (softmax_math::Share), and the block merges the threads' shares in a fixed order, so a
// row gets the same bits run after run.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda_packs.h"
#include "fused_norm_math.h"
#include "softmax_kernel.h"
#include "softmax_math.h"

namespace siamese::kernels {
namespace {

using cuda_packs::aligned16;
using cuda_packs::DeviceExp;
using cuda_packs::Pack;
using row_math::narrow;
using row_math::widen;
using softmax_math::Share;

constexpr int kThreads = 512;
constexpr int kWarp = 32;
constexpr int64_t kMaxGrid = 1 << 16;

__device__ inline Share shuffle(Share s, int offset) {
  return {__shfl_xor_sync(0xffffffffu, s.m, offset), __shfl_xor_sync(0xffffffffu, s.s, offset)};
}

// Every thread's share merged over the block; every thread returns the same bits.
__device__ Share block_merge(Share s) {
  __shared__ Share warp_shares[kThreads / kWarp];
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    s = softmax_math::merge(s, shuffle(s, offset), DeviceExp{});
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) warp_shares[warp] = s;
  __syncthreads();
  Share total{-INFINITY, 0.0f};
  for (int w = 0; w < kThreads / kWarp; ++w) total = softmax_math::merge(total, warp_shares[w], DeviceExp{});
  __syncthreads();  // warp_shares is rewritten for the next row
  return total;
}

template <typename T, int V>
__global__ void stats_kernel(SoftmaxArgs a) {
  const T* x = static_cast<const T*>(a.x);
  const int64_t packs = a.vocab / V;
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const auto* in = reinterpret_cast<const Pack<T, V>*>(x + row * a.vocab);
    Share s{-INFINITY, 0.0f};
    for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
      const Pack<T, V> pack = in[p];
      float v[V], m = -INFINITY;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        v[k] = widen(pack.v[k]);
        m = fmaxf(m, v[k]);
      }
      // A -inf logit adds nothing, also where the whole pack is -inf (m = -inf, and
      // -inf - -inf would be NaN); a NaN still reaches the sum.
      float sum = 0.0f;
#pragma unroll
      for (int k = 0; k < V; ++k) sum += v[k] == -INFINITY ? 0.0f : expf(v[k] - m);
      s = softmax_math::merge(s, Share{m, sum}, DeviceExp{});
    }
    const Share total = block_merge(s);
    if (threadIdx.x == 0) {
      a.max[row] = total.m;
      a.log_sum[row] = logf(total.s);
    }
  }
}

template <typename T, int V>
__global__ void grad_kernel(SoftmaxArgs a) {
  const T* x = static_cast<const T*>(a.x);
  T* grad = static_cast<T*>(a.grad);
  const int64_t packs = a.vocab / V;
  const float target_grad = *a.target_grad;
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const auto* in = reinterpret_cast<const Pack<T, V>*>(x + row * a.vocab);
    auto* out = reinterpret_cast<Pack<T, V>*>(grad + row * a.vocab);
    const float max = a.max[row], log_sum = a.log_sum[row], scale = a.row_scale[row * a.row_scale_stride];
    const int64_t target = a.targets[row];
    for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
      const Pack<T, V> pack = in[p];
      Pack<T, V> o;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float xk = widen(pack.v[k]);
        o.v[k] = narrow<T>(p * V + k == target
                               ? softmax_math::target_entry(xk, max, log_sum, scale, target_grad, DeviceExp{})
                               : softmax_math::scaled_probability(xk, max, log_sum, scale, DeviceExp{}));
      }
      out[p] = o;
    }
  }
}

template <bool kGrad, typename T>
void launch(const SoftmaxArgs& a, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const bool packed = a.vocab % kVec == 0 && aligned16(a.x) && (!kGrad || aligned16(a.grad));
  const int grid = static_cast<int>(a.rows < kMaxGrid ? a.rows : kMaxGrid);
  if constexpr (kGrad) {
    if (packed)
      grad_kernel<T, kVec><<<grid, kThreads, 0, stream>>>(a);
    else
      grad_kernel<T, 1><<<grid, kThreads, 0, stream>>>(a);
  } else {
    if (packed)
      stats_kernel<T, kVec><<<grid, kThreads, 0, stream>>>(a);
    else
      stats_kernel<T, 1><<<grid, kThreads, 0, stream>>>(a);
  }
}

template <bool kGrad>
const char* run(const SoftmaxArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return nullptr;
  switch (a.dtype) {
    case DType::Float32:
      launch<kGrad, float>(a, stream);
      break;
    case DType::BFloat16:
      launch<kGrad, __nv_bfloat16>(a, stream);
      break;
    case DType::Float16:
      launch<kGrad, __half>(a, stream);
      break;
    default:
      return "cross-entropy kernels: unsupported dtype on CUDA";
  }
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace

const char* log_softmax_stats_cuda(const SoftmaxArgs& a, CUstream_st* stream) {
  return run<false>(a, stream);
}

const char* cross_entropy_grad_cuda(const SoftmaxArgs& a, CUstream_st* stream) {
  return run<true>(a, stream);
}

}  // namespace siamese::kernels
