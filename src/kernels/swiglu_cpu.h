#pragma once
// SwiGLU on the CPU as one pass each way (the CPU backend of kernels/swiglu.h), for float32
// and bfloat16 rows h = [a | b] of width 2n: out = a silu(b), dh = [g silu(b) | g a silu'(b)].
// Computed in float (swiglu_math.h): silu to a few ulp of ATen's.
#include <cstdint>

namespace siamese::kernels {

// h: [rows, 2n]; out: [rows, n]. bf16: storage is bfloat16 (uint16_t bits), else float.
void swiglu_forward(const void* h, void* out, int64_t rows, int64_t n, bool bf16);

// g: [rows, n]; dh: [rows, 2n].
void swiglu_backward(const void* h, const void* g, void* dh, int64_t rows, int64_t n, bool bf16);

}  // namespace siamese::kernels
