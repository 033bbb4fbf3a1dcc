#pragma once
// SwiGLU's element maths, written once for both backends: the CPU loops (swiglu_cpu.cpp) and
// the CUDA kernels (swiglu.cu). For a row h = [a | b]:
//   out = a silu(b),  silu(b) = b s,  s = sigmoid(b),
// and with g the output's gradient:
//   da = g silu(b),  db = g a silu'(b),  silu'(b) = s (1 + b (1 - s)).
// Everything is float. Each backend brings its exp of a non-positive argument: the CPU a
// polynomial without calls or branches, so that its loops vectorise (cpu_loops.h); CUDA its
// expf.
#include "host_device.h"

namespace siamese::kernels::swiglu_math {

// sigmoid(b) from e = exp(-|b|) <= 1, so nothing overflows: 1 / (1 + e) for b >= 0, e / (1 + e)
// below.
template <typename Exp>
SIAMESE_HD inline float sigmoid(float b, Exp exp_nonpositive) {
  const float e = exp_nonpositive(b < 0.0f ? b : -b);
  const float inv = 1.0f / (1.0f + e);
  return b < 0.0f ? e * inv : inv;
}

template <typename Exp>
SIAMESE_HD inline float value(float a, float b, Exp exp_nonpositive) {
  return a * (b * sigmoid(b, exp_nonpositive));
}

struct Grads {
  float da, db;
};

template <typename Exp>
SIAMESE_HD inline Grads grads(float a, float b, float g, Exp exp_nonpositive) {
  const float s = sigmoid(b, exp_nonpositive);
  return {g * (b * s), g * a * (s * (1.0f + b * (1.0f - s)))};
}

}  // namespace siamese::kernels::swiglu_math
