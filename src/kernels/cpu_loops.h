#pragma once
// Pieces of the CPU loops that GCC vectorises (softmax_cpu.cpp, swiglu_cpu.cpp): an exp with
// no calls and no branches, so a loop over it becomes vector code (with -fno-trapping-math,
// which lets the clamps become selects), loads and stores that compute bfloat16 in float,
// and a guard that keeps subnormals out. Include it only from files compiled with those
// flags (src/kernels/CMakeLists.txt).
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

// A namespace of its own: its load and store would clash with fused_norm_math.h's.
namespace siamese::kernels::cpu_loops {

// exp(v) for v <= 0, zero below -87 (exp(-87) = 1.6e-38, just above FLT_MIN), so that every
// intermediate stays a normal float. Range reduction v = n ln2 + r with ln2 split in two
// (Cody-Waite), then Cephes's degree-5 minimax polynomial for exp(r) on |r| <= ln2 / 2
// (S. Moshier, Cephes Math Library, expf.c; 2 ulp here) and 2^n written into the exponent.
inline float exp_nonpositive(float v) {
  constexpr float kLowest = -87.0f;
  float x = v < kLowest ? kLowest : v;
  x = x > 0.0f ? 0.0f : x;
  // Round to nearest by the 1.5 * 2^23 shift: no call, so the loop vectorises.
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e_r = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, sizeof two_n);
  const float e = e_r * two_n;
  return v < kLowest ? 0.0f : e;
}

// One copy of a loop per AVX width, picked when the program loads (GCC's ifunc): x86-64-v4
// (AVX-512 with its byte and word instructions, which bfloat16 loads and stores need to
// vectorise; "avx512f" alone left them scalar), AVX2, and the baseline. Not under
// ThreadSanitizer: its instrumented resolver would run during relocation, before TSan is set
// up, and crash the program at start.
#if defined(__SANITIZE_THREAD__)
#define SIAMESE_VECTOR_CLONES
#else
#define SIAMESE_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#endif

inline float load(const float* p, int64_t i) { return p[i]; }
inline float load(const c10::BFloat16* p, int64_t i) { return static_cast<float>(p[i]); }
inline void store(float* p, int64_t i, float v) { p[i] = v; }
inline void store(c10::BFloat16* p, int64_t i, float v) { p[i] = c10::BFloat16(v); }

// Flush-to-zero and denormals-are-zero on this thread while alive: products with small
// factors (the loss's row scale of 1 / tokens) would otherwise still make subnormals, and
// every op on one takes a microcode assist.
class FlushSubnormals {
 public:
#if defined(__x86_64__)
  FlushSubnormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040u); }
  ~FlushSubnormals() { _mm_setcsr(saved_); }

 private:
  unsigned saved_;
#endif
};

// row(i) for every row i of `rows` rows of `width` elements, spread over the threads in tasks
// of about 32k elements (small inputs stay on one thread), subnormals flushed.
template <typename Row>
void each_row(int64_t rows, int64_t width, Row row) {
  at::parallel_for(0, rows, width >= 32768 ? 1 : 32768 / width, [&](int64_t begin, int64_t end) {
    const FlushSubnormals ftz;
    for (int64_t i = begin; i < end; ++i) row(i);
  });
}

}  // namespace siamese::kernels::cpu_loops
