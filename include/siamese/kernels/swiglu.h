#pragma once
// SwiGLU as one pass each way, the ops under model/mlp.cpp's autograd node. For h = [a | b]
// of width 2n along the last dimension: out = a silu(b), and backward dh = [g silu(b) |
// g a silu'(b)], computed in float from h's dtype and stored in it (swiglu_math.h, shared by
// both backends). On the CPU (float32, bfloat16) the vectorised loops of swiglu_cpu.h; on CUDA
// (float32, bfloat16, float16) the kernels of src/kernels/swiglu.cu.
#include <torch/torch.h>

namespace siamese::kernels {

// Whether h's device and dtype have a fused pass.
bool swiglu_supports(const torch::Tensor& h);

// h: [..., 2n] -> [..., n].
torch::Tensor swiglu(const torch::Tensor& h);

// g: [..., n] in h's dtype -> dh: [..., 2n].
torch::Tensor swiglu_backward(const torch::Tensor& h, const torch::Tensor& g);

}  // namespace siamese::kernels
