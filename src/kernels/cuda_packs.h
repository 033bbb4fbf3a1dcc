#pragma once
// What the element-wise CUDA kernels share (swiglu.cu, softmax.cu): 16-byte packs of a row
// moved as one load or store, the alignment test that allows them, and the exp each passes
// to its maths header. Include only from .cu files.
#include <cstdint>

namespace siamese::kernels::cuda_packs {

// V elements moved as one load or store.
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

template <typename T, int V>
__device__ inline Pack<T, V> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<T, V>*>(p);
}
template <typename T, int V>
__device__ inline void store_pack(T* p, const Pack<T, V>& v) {
  *reinterpret_cast<Pack<T, V>*>(p) = v;
}

// Packs need every row to start on a 16-byte boundary: the caching allocator's buffers do.
inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

struct DeviceExp {
  __device__ float operator()(float v) const { return expf(v); }
};

}  // namespace siamese::kernels::cuda_packs
