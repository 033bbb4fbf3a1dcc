// Compiled with -fno-trapping-math (so GCC turns cpu_loops.h's clamps into vector selects)
// and -ffp-contract=off (so every clone below computes the same bits): CMakeLists.txt.
#include "softmax_cpu.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "cpu_loops.h"

namespace siamese::model::softmax_cpu {
namespace {

using cpu_loops::each_row;
using cpu_loops::exp_nonpositive;
using cpu_loops::load;
using cpu_loops::store;

// Each row function has one clone per vector width, picked once at load time; without FMA
// contraction each gives the same bits as the baseline one.

template <typename T>
SIAMESE_VECTOR_CLONES void scaled_exp_row(const float* lp, float scale, T* out, int64_t n) {
  for (int64_t j = 0; j < n; ++j) store(out, j, exp_nonpositive(lp[j]) * scale);
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

// exp(x - shift) into out: the log-softmax's first pass, whose output row stays in cache for
// the sum and the final pass.
template <typename T>
SIAMESE_VECTOR_CLONES void shifted_exp_row(const T* x, float shift, float* out, int64_t n) {
  for (int64_t j = 0; j < n; ++j) out[j] = exp_nonpositive(load(x, j) - shift);
}

// Partial sums in 16 lanes: GCC vectorises a reduction only over independent lanes.
constexpr int kLanes = 16;

SIAMESE_VECTOR_CLONES float row_sum(const float* x, int64_t n) {
  float lane[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int k = 0; k < kLanes; ++k) lane[k] += x[j + k];
  float s = 0.0f;
  for (; j < n; ++j) s += x[j];
  for (int k = 0; k < kLanes; ++k) s += lane[k];
  return s;
}

// (x - max) - log(sum), not x - (max + log(sum)): max + log(sum) would round at the scale of
// the logits, and that error would reach every log-probability of the row.
template <typename T>
SIAMESE_VECTOR_CLONES void log_probs_row(const T* x, float max, float log_sum, float* out, int64_t n) {
  for (int64_t j = 0; j < n; ++j) out[j] = (load(x, j) - max) - log_sum;
}

template <typename T>
void log_softmax_of(const T* x, float* out, int64_t rows, int64_t vocab) {
  each_row(rows, vocab, [&](int64_t i) {
    const T* row = x + i * vocab;
    float* lp = out + i * vocab;
    const float m = row_max(row, vocab);
    shifted_exp_row(row, m, lp, vocab);
    log_probs_row(row, m, std::log(row_sum(lp, vocab)), lp, vocab);
  });
}

// The target's entry is computed again in float and stored once, so that a bfloat16 gradient
// rounds it once.
template <typename T>
void cross_entropy_grad_of(const float* log_probs, const float* row_scale, int64_t row_scale_stride,
                           const int64_t* targets, float target_grad, T* grad, int64_t rows, int64_t vocab) {
  each_row(rows, vocab, [&](int64_t i) {
    const float* lp = log_probs + i * vocab;
    const float scale = row_scale[i * row_scale_stride];
    T* out = grad + i * vocab;
    scaled_exp_row(lp, scale, out, vocab);
    store(out, targets[i], exp_nonpositive(lp[targets[i]]) * scale - target_grad);
  });
}

}  // namespace

void log_softmax(const void* x, bool bf16, float* out, int64_t rows, int64_t vocab) {
  if (bf16) return log_softmax_of(static_cast<const c10::BFloat16*>(x), out, rows, vocab);
  log_softmax_of(static_cast<const float*>(x), out, rows, vocab);
}

void cross_entropy_grad(const float* log_probs, const float* row_scale, int64_t row_scale_stride,
                        const int64_t* targets, float target_grad, void* grad, bool bf16, int64_t rows,
                        int64_t vocab) {
  if (bf16)
    return cross_entropy_grad_of(log_probs, row_scale, row_scale_stride, targets, target_grad,
                                 static_cast<c10::BFloat16*>(grad), rows, vocab);
  cross_entropy_grad_of(log_probs, row_scale, row_scale_stride, targets, target_grad,
                        static_cast<float*>(grad), rows, vocab);
}

}  // namespace siamese::model::softmax_cpu
