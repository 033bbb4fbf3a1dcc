#pragma once
// The cross-entropy's element maths, written once for both backends: the CPU loops
// (softmax_cpu.cpp) and the CUDA kernels (softmax.cu). Per row x of logits, with max and
// log_sum = log(sum_j exp(x_j - max)) its statistics:
//   log_softmax(x)_j = (x_j - max) - log_sum
// and the gradient of the row's scaled loss:
//   grad_j = exp((x_j - max) - log_sum) scale,  grad_target -= target_grad.
// (x - max) - log_sum, not x - (max + log_sum): the sum would round at the scale of the
// logits, and that error would reach every probability of the row. Everything is float; each
// backend brings its exp of a non-positive argument (the CPU a polynomial its loops vectorise,
// cpu_loops.h; CUDA its expf).
#include "host_device.h"

namespace siamese::kernels::softmax_math {

template <typename Exp>
SIAMESE_HD inline float scaled_probability(float x, float max, float log_sum, float scale,
                                           Exp exp_nonpositive) {
  return exp_nonpositive((x - max) - log_sum) * scale;
}

// The target's entry, computed in float and stored once, so that a bfloat16 gradient rounds it
// once.
template <typename Exp>
SIAMESE_HD inline float target_entry(float x, float max, float log_sum, float scale, float target_grad,
                                     Exp exp_nonpositive) {
  return scaled_probability(x, max, log_sum, scale, exp_nonpositive) - target_grad;
}

// A share of a row's statistics: its maximum m and sum s of exp(x - m). Merging two shares
// rescales each sum to the larger maximum. A share that saw nothing (s = 0, m = -inf) adds
// nothing; a NaN anywhere reaches s and so the loss.
struct Share {
  float m, s;
};

template <typename Exp>
SIAMESE_HD inline Share merge(Share a, Share b, Exp exp_nonpositive) {
  const float m = a.m > b.m ? a.m : b.m;
  const float sa = a.s == 0.0f ? 0.0f : a.s * exp_nonpositive(a.m - m);
  const float sb = b.s == 0.0f ? 0.0f : b.s * exp_nonpositive(b.m - m);
  return {m, sa + sb};
}

}  // namespace siamese::kernels::softmax_math
