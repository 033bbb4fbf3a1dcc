// Compiled with -fno-trapping-math (so GCC turns cpu_loops.h's clamps into vector selects)
// and -ffp-contract=off (so every clone below computes the same bits): CMakeLists.txt.
#include "softmax_cpu.h"

#include <cmath>
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
__attribute__((target_clones("avx512f", "avx2", "default"))) void scaled_exp_row(const float* lp, float scale,
                                                                                 T* out, int64_t n) {
  for (int64_t j = 0; j < n; ++j) store(out, j, exp_nonpositive(lp[j]) * scale);
}

// Partial sums and maxima in 16 lanes: GCC vectorises a reduction only over independent lanes.
constexpr int kLanes = 16;

template <typename T>
__attribute__((target_clones("avx512f", "avx2", "default"))) float row_max(const T* x, int64_t n) {
  float lane[kLanes];
  for (int k = 0; k < kLanes; ++k) lane[k] = -std::numeric_limits<float>::infinity();
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int k = 0; k < kLanes; ++k) {
      const float v = load(x, j + k);
      lane[k] = v > lane[k] ? v : lane[k];
    }
  float m = -std::numeric_limits<float>::infinity();
  for (; j < n; ++j) m = load(x, j) > m ? load(x, j) : m;
  for (int k = 0; k < kLanes; ++k) m = lane[k] > m ? lane[k] : m;
  return m;
}

template <typename T>
__attribute__((target_clones("avx512f", "avx2", "default"))) float row_sum_exp(const T* x, float shift,
                                                                               int64_t n) {
  float lane[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int k = 0; k < kLanes; ++k) lane[k] += exp_nonpositive(load(x, j + k) - shift);
  float s = 0.0f;
  for (; j < n; ++j) s += exp_nonpositive(load(x, j) - shift);
  for (int k = 0; k < kLanes; ++k) s += lane[k];
  return s;
}

// (x - max) - log(sum), not x - (max + log(sum)): max + log(sum) would round at the scale of
// the logits, and that error would reach every log-probability of the row.
template <typename T>
__attribute__((target_clones("avx512f", "avx2", "default"))) void log_probs_row(const T* x, float max,
                                                                                float log_sum, float* out,
                                                                                int64_t n) {
  for (int64_t j = 0; j < n; ++j) out[j] = (load(x, j) - max) - log_sum;
}

template <typename T>
void log_softmax_of(const T* x, float* out, int64_t rows, int64_t vocab) {
  each_row(rows, vocab, [&](int64_t i) {
    const T* row = x + i * vocab;
    const float m = row_max(row, vocab);
    log_probs_row(row, m, std::log(row_sum_exp(row, m, vocab)), out + i * vocab, vocab);
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
