#pragma once
// What a topology changes inside one block's sublayers (topology.h's sublayer_hooks; nGPT's
// normalized attention and MLP, DeepCrossAttention's separate query, key and value inputs). Attention and MLP
// call these without knowing which topology they serve; an empty member leaves the plain computation.
#include <torch/torch.h>

#include <functional>
#include <optional>
#include <utility>

namespace siamese::model {

struct SublayerHooks {
  using Pair = std::pair<torch::Tensor, torch::Tensor>;
  // Attention: maps the projected queries and keys ([B, T, width], before the head split and
  // RoPE).
  std::function<Pair(const torch::Tensor& q, const torch::Tensor& k)> qk;
  // Attention: the factor on q.k before the softmax, instead of 1/sqrt(head_dim).
  std::optional<double> softmax_scale;
  // Attention: its input is [3, B, T, d], one input each for the queries, keys and values
  // (DeepCrossAttention), each projected by its own rows of att_proj.
  bool separate_qkv = false;
  // SwiGLU MLP: maps its value and gate halves before silu(gate) * value.
  std::function<Pair(const torch::Tensor& value, const torch::Tensor& gate)> swiglu;
};

}  // namespace siamese::model
