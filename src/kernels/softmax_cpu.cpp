// The cross-entropy's CPU loops over softmax_math.h. Compiled with -fno-trapping-math (so GCC turns
// cpu_loops.h's clamps into vector selects) and -ffp-contract=off (so every clone below computes the same
// bits): src/kernels/CMakeLists.txt.
#include "softmax_cpu.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "cpu_loops.h"
#include "softmax_math.h"

namespace siamese::kernels {
namespace {

using cpu_loops::each_row;
using cpu_loops::exp_nonpositive;
using cpu_loops::load;
using cpu_loops::store;

struct CpuExp {
  float operator()(float v) const { return exp_nonpositive(v); }
};

// Each row function has one clone per vector width, picked once at load time; without FMA
// contraction each gives the same bits as the baseline one.

// Out of place: rewriting the logits' own buffer took 1.6x as long on this project's Xeon
// (2 threads over [2040, 50304] float32: 78 against 47 ms).
template <typename T>
SIAMESE_VECTOR_CLONES void softmax_grad_row(const T* __restrict x, float max, float log_sum, float scale,
                                            T* __restrict out, int64_t n) {
  for (int64_t j = 0; j < n; ++j)
    store(out, j, softmax_math::scaled_probability(load(x, j), max, log_sum, scale, CpuExp{}));
}

// A float's bits as an int32 in the floats' order (negative floats get their magnitude bits
// flipped), and back: GCC vectorises an integer max reduction, where a float one needs
// -ffinite-math-only. NaNs order above +inf, so a row with one gives a NaN maximum.
inline int32_t ordered_bits(float v) {
  int32_t i;
  std::memcpy(&i, &v, sizeof i);
  return i ^ ((i >> 31) & 0x7fffffff);
}
inline float from_ordered_bits(int32_t i) {
  i ^= (i >> 31) & 0x7fffffff;
  float v;
  std::memcpy(&v, &i, sizeof v);
  return v;
}

template <typename T>
SIAMESE_VECTOR_CLONES float row_max(const T* x, int64_t n) {
  int32_t m = std::numeric_limits<int32_t>::min();
  for (int64_t j = 0; j < n; ++j) {
    const int32_t o = ordered_bits(load(x, j));
    m = o > m ? o : m;
  }
  return from_ordered_bits(m);
}

// Partial sums in 16 lanes: GCC vectorises a reduction only over independent lanes.
constexpr int kLanes = 16;

// sum_j exp(x[j] - shift), with nothing written: the row was just read by row_max and is
// read again from cache.
template <typename T>
SIAMESE_VECTOR_CLONES float shifted_exp_sum(const T* x, float shift, int64_t n) {
  float lane[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int k = 0; k < kLanes; ++k) lane[k] += exp_nonpositive(load(x, j + k) - shift);
  float s = 0.0f;
  for (; j < n; ++j) s += exp_nonpositive(load(x, j) - shift);
  for (int k = 0; k < kLanes; ++k) s += lane[k];
  return s;
}

template <typename T>
void log_softmax_stats_of(const T* x, float* max, float* log_sum, int64_t rows, int64_t vocab) {
  each_row(rows, vocab, [&](int64_t i) {
    const T* row = x + i * vocab;
    max[i] = row_max(row, vocab);
    log_sum[i] = std::log(shifted_exp_sum(row, max[i], vocab));
  });
}

template <typename T>
void cross_entropy_grad_of(const T* x, const float* max, const float* log_sum, const float* row_scale,
                           int64_t row_scale_stride, const int64_t* targets, float target_grad, T* grad,
                           int64_t rows, int64_t vocab) {
  each_row(rows, vocab, [&](int64_t i) {
    const T* in = x + i * vocab;
    T* out = grad + i * vocab;
    const float scale = row_scale[i * row_scale_stride];
    const float at_target =
        softmax_math::target_entry(load(in, targets[i]), max[i], log_sum[i], scale, target_grad, CpuExp{});
    softmax_grad_row(in, max[i], log_sum[i], scale, out, vocab);
    store(out, targets[i], at_target);
  });
}

}  // namespace

void log_softmax_stats(const void* x, bool bf16, float* max, float* log_sum, int64_t rows, int64_t vocab) {
  if (bf16) return log_softmax_stats_of(static_cast<const c10::BFloat16*>(x), max, log_sum, rows, vocab);
  log_softmax_stats_of(static_cast<const float*>(x), max, log_sum, rows, vocab);
}

void cross_entropy_grad(const void* x, const float* max, const float* log_sum, const float* row_scale,
                        int64_t row_scale_stride, const int64_t* targets, float target_grad, void* grad,
                        bool bf16, int64_t rows, int64_t vocab) {
  if (bf16)
    return cross_entropy_grad_of(static_cast<const c10::BFloat16*>(x), max, log_sum, row_scale,
                                 row_scale_stride, targets, target_grad, static_cast<c10::BFloat16*>(grad),
                                 rows, vocab);
  cross_entropy_grad_of(static_cast<const float*>(x), max, log_sum, row_scale, row_scale_stride, targets,
                        target_grad, static_cast<float*>(grad), rows, vocab);
}

}  // namespace siamese::kernels
