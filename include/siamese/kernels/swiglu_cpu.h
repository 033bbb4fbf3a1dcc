#pragma once
// SwiGLU on the CPU as one pass each way (model/mlp.cpp), for float32 and bfloat16 rows
// h = [a | b] of width 2n: out = a silu(b). LibTorch's form takes a silu, a product, and in
// backward a silu_backward, two products and the concatenation of the halves' gradients; this
// writes dh = [g silu(b) | g a silu'(b)] in place. Computed in float: silu to a few ulp of
// ATen's.
#include <cstdint>

namespace siamese::kernels {

// h: [rows, 2n]; out: [rows, n]. bf16: storage is bfloat16 (uint16_t bits), else float.
void swiglu_forward(const void* h, void* out, int64_t rows, int64_t n, bool bf16);

// g: [rows, n]; dh: [rows, 2n].
void swiglu_backward(const void* h, const void* g, void* dh, int64_t rows, int64_t n, bool bf16);

}  // namespace siamese::kernels
