#pragma once
// The element maths of the attention's head preparation (qkv_heads.h), written once for both
// backends: the CPU loop (qkv_heads_cpu.cpp) and the CUDA kernels (qkv_heads.cu). A head row
// of x (hd values of q, k or v for one token and head) is normalized without weights, as
// the per-head norms OLMo-1B's configs give (RMSNorm, or LayerNorm when centered):
//   mu = mean(x) (0 for RMSNorm),  r = rsqrt(mean((x - mu)^2) + eps),  u = (x - mu) r,
// then q's and k's rows are rotated by RoPE's rotate-half, each element i < hd / 2 paired
// with i + hd / 2 at the angle of (position, i):
//   y_i = u_i c - u_{i+h} s,  y_{i+h} = u_{i+h} c + u_i s.
// Backward rotates the gradient back (the rotation by -angle) and takes the norm's
//   dx = r (du - mean(du) - u mean(du u))   (RMSNorm: without the mean(du) term).
// Everything is float; the backends differ in how a row's elements and sums are spread.
#include "host_device.h"

namespace siamese::kernels::qkv_math {

struct Pair {
  float first, second;
};

// The rotation of (u_i, u_{i+h}) by the angle with sine s, cosine c; sign -1 rotates back.
SIAMESE_HD inline Pair rotate(float first, float second, float c, float s, float sign) {
  const float ss = sign * s;
  return {first * c - second * ss, second * c + first * ss};
}

// Per-row statistics of the norm from sum(x) and sum((x - mu)^2) over hd values.
SIAMESE_HD inline float mean_of(float sum, int hd, bool centered) {
  return centered ? sum / float(hd) : 0.0f;
}

template <typename Rsqrt>
SIAMESE_HD inline float rstd_of(float centered_square_sum, int hd, float eps, Rsqrt rsqrt_fn) {
  return rsqrt_fn(centered_square_sum / float(hd) + eps);
}

// dx of one element from the row's means of du and du * u.
SIAMESE_HD inline float norm_grad(float du, float u, float r, float mean_du, float mean_du_u, bool centered) {
  return r * (du - (centered ? mean_du : 0.0f) - u * mean_du_u);
}

}  // namespace siamese::kernels::qkv_math
