#pragma once
// RoPE's rotate-half rotation, the op under model/rope.h's autograd node.
#include <torch/torch.h>

namespace siamese::kernels {

// The rotation of t's two halves by angles with sines sign * s and cosines c ([.., hd / 2]
// broadcast against them): [t1 c - t2 s, t2 c + t1 s], computed in s's dtype and returned in
// t's; sign -1 is the backward. On CUDA, with float32 tables, t of four dimensions [B, H, T,
// hd] with a unit last stride in float32, bfloat16 or float16 and tables [T, hd / 2] or
// [B, 1, T, hd / 2]: one kernel (src/kernels/rope_kernel.cu) that reads t in its dtype
// through any strides, rotates in float32 and writes t's dtype. Elsewhere the halves are
// written by four ATen passes into halves of the output, where the textbook t*cos +
// rotate_half(t)*sin takes a negation, a concatenation and three full-width passes (bench
// --profile: `cat` and `neg` were 2% of the CPU step).
torch::Tensor rope_rotate(const torch::Tensor& t, const torch::Tensor& s, const torch::Tensor& c, float sign);

}  // namespace siamese::kernels
