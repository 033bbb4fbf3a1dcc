// CUDA backend of the fused RoPE rotation (rope_kernel.h): one thread per pair (t1, t2) of
// elements half a head apart, [t1 c - t2 s, t2 c + t1 s] in float32, grid-striding.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "rope_kernel.h"

namespace siamese::kernels {
namespace {

__device__ inline float widen(float v) { return v; }
__device__ inline float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ inline float widen(__half v) { return __half2float(v); }
template <typename T>
__device__ inline T narrow(float v);
template <>
__device__ inline float narrow<float>(float v) {
  return v;
}
template <>
__device__ inline __nv_bfloat16 narrow<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ inline __half narrow<__half>(float v) {
  return __float2half_rn(v);
}

template <typename T>
__global__ void rotate_kernel(RopeArgs a) {
  const int64_t pairs = a.B * a.H * a.T * a.half;
  const T* t = static_cast<const T*>(a.t);
  T* out = static_cast<T*>(a.out);
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < pairs;
       p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = p % a.half, row = p / a.half;  // row = (b, h, pos)
    const int64_t pos = row % a.T, bh = row / a.T, h = bh % a.H, b = bh / a.H;
    const int64_t in = b * a.stride_b + h * a.stride_h + pos * a.stride_t + i;
    const int64_t angle = b * a.table_batch_stride + pos * a.half + i;
    const float t1 = widen(t[in]), t2 = widen(t[in + a.half]);
    const float s = a.sign * a.sin[angle], c = a.cos[angle];
    const int64_t o = row * 2 * a.half + i;
    out[o] = narrow<T>(t1 * c - t2 * s);
    out[o + a.half] = narrow<T>(t2 * c + t1 * s);
  }
}

}  // namespace

const char* run_cuda(const RopeArgs& a, CUstream_st* stream) {
  const int64_t pairs = a.B * a.H * a.T * a.half;
  if (pairs == 0) return nullptr;
  constexpr int kThreads = 256;
  constexpr int64_t kMaxGrid = int64_t(1) << 20;
  const int64_t blocks = (pairs + kThreads - 1) / kThreads;
  const int grid = static_cast<int>(blocks < kMaxGrid ? blocks : kMaxGrid);
  switch (a.dtype) {
    case DType::Float32:
      rotate_kernel<float><<<grid, kThreads, 0, stream>>>(a);
      break;
    case DType::BFloat16:
      rotate_kernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(a);
      break;
    case DType::Float16:
      rotate_kernel<__half><<<grid, kThreads, 0, stream>>>(a);
      break;
    default:
      return "RoPE kernel: unsupported dtype on CUDA";
  }
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace siamese::kernels
