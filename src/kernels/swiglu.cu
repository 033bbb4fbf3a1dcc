// CUDA backend of SwiGLU (swiglu_kernel.h): each thread takes V adjacent columns of one row,
// loads them from both halves of h (and from g) as 16-byte vectors where the widths allow,
// and runs swiglu_math.h on each element in float. Grid-striding.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda_packs.h"
#include "fused_norm_math.h"
#include "swiglu_kernel.h"
#include "swiglu_math.h"

namespace siamese::kernels {
namespace {

using cuda_packs::aligned16;
using cuda_packs::DeviceExp;
using cuda_packs::load_pack;
using cuda_packs::Pack;
using cuda_packs::store_pack;
using row_math::narrow;
using row_math::widen;

// body(a_in, b_in, offset) for every pack of V columns: a_in and b_in point at the pack in both
// halves of h, offset is its place in a [rows, n] tensor. Grid-striding.
template <typename T, int V, typename Body>
__device__ void each_pack(const SwigluArgs& a, Body body) {
  const int64_t per_row = a.n / V, total = a.rows * per_row;
  const T* h = static_cast<const T*>(a.h);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / per_row, j = (i - row * per_row) * V;
    const T* a_in = h + row * 2 * a.n + j;
    body(a_in, a_in + a.n, row * a.n + j);
  }
}

template <typename T, int V>
__global__ void forward_kernel(SwigluArgs a) {
  T* out = static_cast<T*>(a.out);
  each_pack<T, V>(a, [&](const T* a_in, const T* b_in, int64_t offset) {
    const auto av = load_pack<T, V>(a_in), bv = load_pack<T, V>(b_in);
    Pack<T, V> o;
#pragma unroll
    for (int k = 0; k < V; ++k)
      o.v[k] = narrow<T>(swiglu_math::value(widen(av.v[k]), widen(bv.v[k]), DeviceExp{}));
    store_pack<T, V>(out + offset, o);
  });
}

template <typename T, int V>
__global__ void backward_kernel(SwigluArgs a) {
  const T* g = static_cast<const T*>(a.g);
  T* dh = static_cast<T*>(a.out);
  each_pack<T, V>(a, [&](const T* a_in, const T* b_in, int64_t offset) {
    const auto av = load_pack<T, V>(a_in), bv = load_pack<T, V>(b_in), gv = load_pack<T, V>(g + offset);
    Pack<T, V> da, db;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const auto d = swiglu_math::grads(widen(av.v[k]), widen(bv.v[k]), widen(gv.v[k]), DeviceExp{});
      da.v[k] = narrow<T>(d.da);
      db.v[k] = narrow<T>(d.db);
    }
    // dh is laid out as h: the pack's place in h is its place in dh.
    T* dh_row = dh + (a_in - static_cast<const T*>(a.h));
    store_pack<T, V>(dh_row, da);
    store_pack<T, V>(dh_row + a.n, db);
  });
}

// 16-byte packs where every row's halves start on a 16-byte boundary (n a multiple of the
// pack and the buffers aligned, as the caching allocator's are), else single elements.
template <bool kBackward, typename T>
void launch(const SwigluArgs& a, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const bool packed = a.n % kVec == 0 && aligned16(a.h) && aligned16(a.out) && (!a.g || aligned16(a.g));
  const int64_t total = a.rows * (packed ? a.n / kVec : a.n);
  constexpr int kThreads = 256;
  constexpr int64_t kMaxGrid = int64_t(1) << 20;
  const int64_t blocks = (total + kThreads - 1) / kThreads;
  const int grid = static_cast<int>(blocks < kMaxGrid ? blocks : kMaxGrid);
  if constexpr (kBackward) {
    if (packed)
      backward_kernel<T, kVec><<<grid, kThreads, 0, stream>>>(a);
    else
      backward_kernel<T, 1><<<grid, kThreads, 0, stream>>>(a);
  } else {
    if (packed)
      forward_kernel<T, kVec><<<grid, kThreads, 0, stream>>>(a);
    else
      forward_kernel<T, 1><<<grid, kThreads, 0, stream>>>(a);
  }
}

template <bool kBackward>
const char* run(const SwigluArgs& a, cudaStream_t stream) {
  if (a.rows == 0 || a.n == 0) return nullptr;
  switch (a.dtype) {
    case DType::Float32:
      launch<kBackward, float>(a, stream);
      break;
    case DType::BFloat16:
      launch<kBackward, __nv_bfloat16>(a, stream);
      break;
    case DType::Float16:
      launch<kBackward, __half>(a, stream);
      break;
    default:
      return "SwiGLU kernel: unsupported dtype on CUDA";
  }
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace

const char* swiglu_forward_cuda(const SwigluArgs& a, CUstream_st* stream) { return run<false>(a, stream); }

const char* swiglu_backward_cuda(const SwigluArgs& a, CUstream_st* stream) { return run<true>(a, stream); }

}  // namespace siamese::kernels
