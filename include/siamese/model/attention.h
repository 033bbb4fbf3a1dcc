#pragma once
// Causal self-attention as OLMo computes it, with the options this project needs:
// grouped-query / multi-query heads (n_kv_heads), clip_qkv, OLMo's attention_layer_norm
// (full-width Q,K norms before the head split), HybridNorm's per-head Q/K/V norms (one
// [head_dim] weight shared by all heads, after the split and before RoPE) and RoPE.
// It knows nothing about residual paths: input [B,T,d] -> the attention branch output.
#include <torch/torch.h>

#include <optional>

#include "siamese/config/config.h"
#include "siamese/kernels/qkv_heads.h"
#include "siamese/model/attention_call.h"
#include "siamese/model/documents.h"
#include "siamese/model/norm.h"
#include "siamese/model/rope.h"
#include "siamese/model/sublayer_hooks.h"

namespace siamese::model {

// Key/value heads: 1 with multi_query_attention, else n_kv_heads (GQA), else n_heads.
int64_t kv_head_count(const config::ModelConfig& cfg);

// Layer `layer`'s sliding window (model.sliding_window_pattern): how many positions a query
// reads, itself included, as transformers' sliding_window; nullopt for full causal attention.
std::optional<int64_t> attention_window(const config::ModelConfig& cfg, int64_t layer);

// One layer's keys and values (after norms and RoPE, before GQA's repeat) of the positions
// already read, so that decoding one more token reads them instead of recomputing the
// prefix: the per-token cost of generation then does not grow with the prompt. Buffers are
// allocated on first use and filled in place: `capacity` positions for a full-attention
// layer; for a sliding layer of window w only the last w - 1, all a later query can read,
// position p in slot p % (w - 1).
struct LayerCache {
  int64_t capacity = 0;  // positions the sequence may reach
  torch::Tensor k, v;    // [B, n_kv_heads, slots, hd]
  int64_t length = 0;    // positions read so far
  // Optional [B, capacity] bool over positions: false marks a padding key that no query
  // reads (rows of a batch left-padded to one length; each padding query reads only itself).
  torch::Tensor keys_valid;
};

class AttentionImpl : public torch::nn::Module {
 public:
  // `hooks`: what the residual topology changes in it (topology.h, sublayer_hooks);
  // `window`: its sliding window (attention_window), nullopt for full causal attention.
  explicit AttentionImpl(const config::ModelConfig& cfg, SublayerHooks hooks = {},
                         std::optional<int64_t> window = std::nullopt);

  // x: [B, T, d] ([3, B, T, d] with SublayerHooks::separate_qkv). With a cache, x holds the positions after
  // the cached ones; their keys and values are appended to it. With `docs` (packed training rows, never with
  // a cache) a query reads only its own document, at the RoPE positions docs gives. Reads project -> prepare
  // heads -> the cache -> one AttentionCall, run by the first kernel of attention_call.h's table that takes
  // it.
  torch::Tensor forward(const torch::Tensor& x, LayerCache* cache = nullptr, const Documents* docs = nullptr);

  // The largest score scale * q.k that a query of x gives a key it may read (causal, within
  // its window): the attention logit growth that QK-norm and QK-clip are about. A float32
  // scalar on x's device; chunked over queries, so it never holds [T, T] for every head.
  torch::Tensor max_logit(const torch::Tensor& x);

  // The rows of att_proj's weight that make queries, keys and values: views, so scaling them
  // in place scales the projection (topologies' init gains).
  std::vector<torch::Tensor> qkv_weights() const;

  // Routes scores through reference_attention instead of the library kernel (tests).
  void use_reference_kernel(bool on) { reference_ = on; }
  // Takes the one-pass head preparation on the CPU too, where it applies (tests: the model
  // otherwise runs it on CUDA only).
  void use_fused_heads_on_cpu(bool on) { fused_heads_on_cpu_ = on; }

  torch::nn::Linear att_proj{nullptr};  // d -> d + 2 * n_kv_heads * hd, columns [q | k | v]
  torch::nn::Linear attn_out{nullptr};  // d -> d
  Norm q_norm{nullptr}, k_norm{nullptr}, v_norm{nullptr};  // absent unless configured

 private:
  std::vector<int64_t> qkv_sizes() const;  // att_proj's output columns: [q | k | v]
  // The one-pass head preparation (kernels/qkv_heads.h) where it computes what the separate
  // per-head norms and RoPE would: on CUDA, without a cache, per-row positions, full-width Q/K
  // norms or a Q/K hook, with per-head norms (if any) of RMSNorm or LayerNorm kind and no
  // weights, RoPE (if any) in float32.
  std::optional<kernels::QkvHeadsSpec> fused_heads(const torch::Tensor& qkv, const LayerCache* cache,
                                                   const Documents* docs) const;
  // att_proj on x, or on each of x's three inputs with hooks_.separate_qkv: [B, T, q | k | v].
  torch::Tensor project(const torch::Tensor& x);
  // Appends k, v (positions cache.length on) to the cache; returns the keys and values the
  // new queries read and the position of the first of them.
  std::tuple<torch::Tensor, torch::Tensor, int64_t> append(LayerCache& cache, const torch::Tensor& k,
                                                           const torch::Tensor& v) const;
  // q, k, v heads ([B, heads, T, hd], kv heads not yet repeated) after their norms and RoPE:
  // the one-pass preparation where fused_heads says it applies, the separate ops otherwise.
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> prepare_heads(const torch::Tensor& qkv,
                                                                        int64_t past, const LayerCache* cache,
                                                                        const Documents* docs);

  int64_t n_heads_, n_kv_heads_, head_dim_;
  bool full_width_qk_norm_;
  std::optional<double> clip_qkv_;
  double dropout_;
  bool reference_ = false;
  bool fused_heads_on_cpu_ = false;
  std::optional<int64_t> window_;
  std::optional<Rope> rope_;
  SublayerHooks hooks_;
};
TORCH_MODULE(Attention);

}  // namespace siamese::model
