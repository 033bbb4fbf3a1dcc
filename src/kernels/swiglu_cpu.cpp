// The CPU loops of SwiGLU over swiglu_math.h. Compiled with cpu_loops.h's flags
// (src/kernels/CMakeLists.txt): vector selects, and the same bits from every clone.
#include "swiglu_cpu.h"

#include <type_traits>

#include "cpu_loops.h"
#include "swiglu_math.h"

namespace siamese::kernels {
namespace {

using cpu_loops::each_row;
using cpu_loops::load;
using cpu_loops::store;

struct CpuExp {
  float operator()(float v) const { return cpu_loops::exp_nonpositive(v); }
};

template <typename T>
SIAMESE_VECTOR_CLONES void forward_row(const T* h, T* out, int64_t n) {
  const T* a = h;
  const T* b = h + n;
  for (int64_t j = 0; j < n; ++j) store(out, j, swiglu_math::value(load(a, j), load(b, j), CpuExp{}));
}

template <typename T>
SIAMESE_VECTOR_CLONES void backward_row(const T* h, const T* g, T* dh, int64_t n) {
  const T* a = h;
  const T* b = h + n;
  for (int64_t j = 0; j < n; ++j) {
    const auto d = swiglu_math::grads(load(a, j), load(b, j), load(g, j), CpuExp{});
    store(dh, j, d.da);
    store(dh + n, j, d.db);
  }
}

}  // namespace

void swiglu_forward(const void* h, void* out, int64_t rows, int64_t n, bool bf16) {
  auto run = [&](auto* typed) {
    using T = std::remove_pointer_t<decltype(typed)>;
    const T* in = static_cast<const T*>(h);
    T* o = static_cast<T*>(out);
    each_row(rows, n, [&](int64_t i) { forward_row(in + i * 2 * n, o + i * n, n); });
  };
  bf16 ? run(static_cast<c10::BFloat16*>(nullptr)) : run(static_cast<float*>(nullptr));
}

void swiglu_backward(const void* h, const void* g, void* dh, int64_t rows, int64_t n, bool bf16) {
  auto run = [&](auto* typed) {
    using T = std::remove_pointer_t<decltype(typed)>;
    const T* in = static_cast<const T*>(h);
    const T* up = static_cast<const T*>(g);
    T* d = static_cast<T*>(dh);
    each_row(rows, n, [&](int64_t i) { backward_row(in + i * 2 * n, up + i * n, d + i * 2 * n, n); });
  };
  bf16 ? run(static_cast<c10::BFloat16*>(nullptr)) : run(static_cast<float*>(nullptr));
}

}  // namespace siamese::kernels
