#pragma once
// Causal self-attention as OLMo computes it, with the options this project needs:
// grouped-query / multi-query heads (n_kv_heads), clip_qkv, OLMo's attention_layer_norm
// (full-width Q,K norms before the head split), HybridNorm's per-head Q/K/V norms (one
// [head_dim] weight shared by all heads, after the split and before RoPE) and RoPE.
// It knows nothing about residual paths: input [B,T,d] -> the attention branch output.
#include <torch/torch.h>

#include "siamese/config/config.h"
#include "siamese/model/documents.h"
#include "siamese/model/norm.h"
#include "siamese/model/rope.h"
#include "siamese/model/sublayer_hooks.h"

namespace siamese::model {

// Key/value heads: 1 with multi_query_attention, else n_kv_heads (GQA), else n_heads.
int64_t kv_head_count(const config::ModelConfig& cfg);

// softmax(scale q k^T + causal mask) v written out with plain ops, scale 1/sqrt(hd) unless
// given: the reference the fused kernel is tested against. q: [B,H,T,hd]; k, v: [B,H,S,hd]
// (S >= T): the queries are the last T of the S positions (S > T when earlier keys come from
// a KV cache).
torch::Tensor reference_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  double dropout_p, bool training,
                                  std::optional<double> scale = std::nullopt);

// One layer's keys and values (after norms and RoPE, before GQA's repeat) of the positions
// already read, so that decoding one more token reads them instead of recomputing the
// prefix: the per-token cost of generation then does not grow with the prompt. Buffers are
// allocated for `capacity` positions on first use and filled in place.
struct LayerCache {
  int64_t capacity = 0;  // positions the buffers hold
  torch::Tensor k, v;    // [B, n_kv_heads, capacity, hd]
  int64_t length = 0;    // positions filled
  // Optional [B, capacity] bool: false marks a padding key that no query reads (rows of a
  // batch left-padded to one length; each padding query reads only itself).
  torch::Tensor keys_valid;
};

class AttentionImpl : public torch::nn::Module {
 public:
  // `hooks`: what the residual topology changes in it (topology.h, sublayer_hooks).
  explicit AttentionImpl(const config::ModelConfig& cfg, SublayerHooks hooks = {});

  // x: [B, T, d]. With a cache, x holds the positions after the cached ones; their keys and
  // values are appended to it. With `docs` (packed training rows, never with a cache) a
  // query reads only its own document, at the RoPE positions docs gives: the
  // variable-length flash kernel on CUDA for half types (autocast's included), SDPA with
  // docs->allowed otherwise.
  torch::Tensor forward(const torch::Tensor& x, LayerCache* cache = nullptr, const Documents* docs = nullptr);

  // The rows of att_proj's weight that make queries, keys and values: views, so scaling them
  // in place scales the projection (topologies' init gains).
  std::vector<torch::Tensor> qkv_weights() const;

  // Routes scores through reference_attention instead of the library kernel (tests).
  void use_reference_kernel(bool on) { reference_ = on; }

  torch::nn::Linear att_proj{nullptr};  // d -> d + 2 * n_kv_heads * hd, columns [q | k | v]
  torch::nn::Linear attn_out{nullptr};  // d -> d
  Norm q_norm{nullptr}, k_norm{nullptr}, v_norm{nullptr};  // absent unless configured

 private:
  std::vector<int64_t> qkv_sizes() const;  // att_proj's output columns: [q | k | v]

  int64_t n_heads_, n_kv_heads_, head_dim_;
  bool full_width_qk_norm_;
  std::optional<double> clip_qkv_;
  double dropout_;
  bool reference_ = false;
  std::optional<Rope> rope_;
  SublayerHooks hooks_;
};
TORCH_MODULE(Attention);

}  // namespace siamese::model
