#pragma once
// The attention's head preparation as one pass each way: from the fused projection's output
// qkv [B, T, (heads + 2 kv_heads) hd] to the q, k and v the attention reads, each head row
// normalized without weights where its part has a per-head norm (RMSNorm, or LayerNorm
// without bias when centered: OLMo-1B's HybridNorm-family configs) and q's and k's rotated by
// RoPE, in float from qkv's dtype and stored once in it (qkv_heads_math.h, shared by both
// backends); backward writes the gradient of qkv whole, where the composite's backward
// concatenates the three parts' gradients. The CUDA kernels (src/kernels/qkv_heads.cu) are
// what the model runs on a GPU; the CPU loop (qkv_heads_cpu.cpp) is their reference.
#include <torch/torch.h>

#include <array>

namespace siamese::kernels {

struct QkvHeadsSpec {
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  std::array<bool, 3> norm{};  // q, k, v
  bool centered = false;
  double eps = 1e-5;
  bool rope = false;
};

// Whether qkv's device, dtype and shape have the pass: CPU float32 and bfloat16; CUDA also
// float16; head_dim 32, 64, 128 or 256; the last dimension (heads + 2 kv_heads) head_dim.
bool qkv_heads_supports(const torch::Tensor& qkv, const QkvHeadsSpec& spec);

// q [B, heads, T, hd], k and v [B, kv_heads, T, hd]: transposed views of [B, T, heads, hd]
// buffers, the layout flash attention reads. sin and cos: float32 [T, hd / 2] on qkv's
// device (undefined without RoPE).
std::array<torch::Tensor, 3> qkv_heads(const torch::Tensor& qkv, const QkvHeadsSpec& spec,
                                       const torch::Tensor& sin, const torch::Tensor& cos);

// The gradient of qkv from the three outputs' (any strides with a unit last one; undefined
// is zero).
torch::Tensor qkv_heads_backward(const torch::Tensor& qkv, const QkvHeadsSpec& spec, const torch::Tensor& sin,
                                 const torch::Tensor& cos, const std::array<torch::Tensor, 3>& grads);

}  // namespace siamese::kernels
