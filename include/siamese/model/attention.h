#pragma once
// Causal self-attention as OLMo computes it, with the options this project needs:
// grouped-query / multi-query heads (n_kv_heads), clip_qkv, OLMo's attention_layer_norm
// (full-width Q,K norms before the head split), HybridNorm's per-head Q/K/V norms (one
// [head_dim] weight shared by all heads, after the split and before RoPE) and RoPE.
// It knows nothing about residual paths: input [B,T,d] -> the attention branch output.
#include <torch/torch.h>

#include "siamese/config/config.h"
#include "siamese/model/norm.h"
#include "siamese/model/rope.h"

namespace siamese::model {

// softmax(q k^T / sqrt(hd) + causal mask) v written out with plain ops: the reference the
// fused kernel is tested against. q: [B,H,T,hd]; k, v: [B,H,S,hd] (S = T).
torch::Tensor reference_attention(const torch::Tensor& q, const torch::Tensor& k,
                                  const torch::Tensor& v, double dropout_p, bool training);

class AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(const ModelConfig& cfg);

  torch::Tensor forward(const torch::Tensor& x);

  // Routes scores through reference_attention instead of the library kernel (tests).
  void use_reference_kernel(bool on) { reference_ = on; }

  torch::nn::Linear att_proj{nullptr};  // d -> d + 2 * n_kv_heads * hd, columns [q | k | v]
  torch::nn::Linear attn_out{nullptr};  // d -> d
  Norm q_norm{nullptr}, k_norm{nullptr}, v_norm{nullptr};  // absent unless configured

 private:
  int64_t n_heads_, n_kv_heads_, head_dim_;
  bool full_width_qk_norm_;
  std::optional<double> clip_qkv_;
  double dropout_;
  bool reference_ = false;
  std::optional<Rope> rope_;
};
TORCH_MODULE(Attention);

}  // namespace siamese::model
