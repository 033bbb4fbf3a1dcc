#include "siamese/model/attention.h"

#include <cmath>
#include <limits>

#include "siamese/common/autocast.h"

namespace siamese::model {

int64_t kv_head_count(const config::ModelConfig& cfg) {
  return cfg.multi_query_attention ? 1 : cfg.n_kv_heads.value_or(cfg.n_heads);
}

torch::Tensor reference_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  double dropout_p, bool training, std::optional<double> scale) {
  const int64_t T = q.size(-2), S = k.size(-2);
  auto scores = torch::matmul(q, k.transpose(-2, -1)) * scale.value_or(1.0 / std::sqrt(double(q.size(-1))));
  auto future = torch::ones({T, S}, torch::dtype(torch::kBool).device(q.device())).triu(S - T + 1);
  scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
  auto weights = torch::dropout(torch::softmax(scores, -1), dropout_p, training);
  return torch::matmul(weights, v);
}

AttentionImpl::AttentionImpl(const config::ModelConfig& cfg, SublayerHooks hooks)
    : n_heads_(cfg.n_heads),
      n_kv_heads_(kv_head_count(cfg)),
      head_dim_(cfg.d_model / cfg.n_heads),
      full_width_qk_norm_(cfg.attention_layer_norm),
      clip_qkv_(cfg.clip_qkv),
      dropout_(cfg.attention_dropout),
      hooks_(std::move(hooks)) {
  const int64_t d = cfg.d_model, kv = n_kv_heads_ * head_dim_;
  att_proj = register_module(
      "att_proj", torch::nn::Linear(torch::nn::LinearOptions(d, d + 2 * kv).bias(cfg.include_bias)));
  attn_out =
      register_module("attn_out", torch::nn::Linear(torch::nn::LinearOptions(d, d).bias(cfg.include_bias)));
  auto norm = [&](const char* name, int64_t dim) {
    return register_module(name, make_norm(cfg, dim, cfg.attention_layer_norm_with_affine));
  };
  if (cfg.attention_layer_norm) {
    q_norm = norm("q_norm", d);
    k_norm = norm("k_norm", kv);
  }
  if (cfg.use_query_norm) q_norm = norm("q_norm", head_dim_);
  if (cfg.use_key_norm) k_norm = norm("k_norm", head_dim_);
  if (cfg.use_value_norm) v_norm = norm("v_norm", head_dim_);
  if (cfg.rope) rope_.emplace(head_dim_, cfg.rope_theta, cfg.rope_full_precision);
}

std::vector<int64_t> AttentionImpl::qkv_sizes() const {
  const int64_t kv = n_kv_heads_ * head_dim_;
  return {n_heads_ * head_dim_, kv, kv};
}

std::vector<torch::Tensor> AttentionImpl::qkv_weights() const {
  return att_proj->weight.split_with_sizes(qkv_sizes(), 0);
}

namespace {

// The type the variable-length flash kernel would run q in: under CUDA autocast the autocast
// type (the kernel is no autocast op, so the cast is ours; q/k norms may hand back float32),
// else q's own. nullopt when the kernel cannot take it: it needs fp16 / bf16 heads of at most
// 256 channels, a multiple of 8.
std::optional<at::ScalarType> flash_varlen_type(const torch::Tensor& q, const Documents& docs) {
  if (!docs.cu_seqlens.defined() || !q.is_cuda() || q.size(-1) % 8 != 0 || q.size(-1) > 256)
    return std::nullopt;
  const auto t = matmul_dtype(q);
  if (t != torch::kHalf && t != torch::kBFloat16) return std::nullopt;
  return t;
}

}  // namespace

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, LayerCache* cache, const Documents* docs) {
  const int64_t B = x.size(0), T = x.size(1), d = n_heads_ * head_dim_;
  auto qkv = att_proj(x);
  if (clip_qkv_) qkv = qkv.clamp(-*clip_qkv_, *clip_qkv_);
  auto parts = qkv.split_with_sizes(qkv_sizes(), -1);
  auto q = parts[0], k = parts[1], v = parts[2];
  if (full_width_qk_norm_) {
    q = q_norm(q);
    k = k_norm(k);
  }
  if (hooks_.qk) std::tie(q, k) = hooks_.qk(q, k);
  auto heads = [&](const torch::Tensor& t, int64_t h) {
    return t.view({B, T, h, head_dim_}).transpose(1, 2);
  };
  q = heads(q, n_heads_);
  k = heads(k, n_kv_heads_);
  v = heads(v, n_kv_heads_);
  if (!full_width_qk_norm_) {
    if (q_norm) q = q_norm(q);
    if (k_norm) k = k_norm(k);
  }
  if (v_norm) v = v_norm(v);
  TORCH_CHECK(!(docs && cache), "document masks are for packed training rows, not KV-cache decoding");
  const int64_t past = cache ? cache->length : 0;
  if (rope_ && docs && docs->positions.defined())
    std::tie(q, k) = rope_->apply(q, k, docs->positions);
  else if (rope_)
    std::tie(q, k) = rope_->apply(q, k, past);
  if (cache) {
    TORCH_CHECK(past + T <= cache->capacity, "KV cache of ", cache->capacity, " positions cannot take ",
                past + T);
    if (!cache->k.defined()) {
      cache->k = torch::empty({B, n_kv_heads_, cache->capacity, head_dim_}, k.options());
      cache->v = torch::empty({B, n_kv_heads_, cache->capacity, head_dim_}, v.options());
    }
    cache->k.narrow(2, past, T).copy_(k);
    cache->v.narrow(2, past, T).copy_(v);
    cache->length = past + T;
    k = cache->k.narrow(2, 0, past + T);
    v = cache->v.narrow(2, 0, past + T);
  }
  if (n_kv_heads_ != n_heads_) {
    // Query head j reads kv head j / (n_heads / n_kv_heads), as OLMo's repeat_interleave.
    k = k.repeat_interleave(n_heads_ / n_kv_heads_, 1);
    v = v.repeat_interleave(n_heads_ / n_kv_heads_, 1);
  }
  const double p = is_training() ? dropout_ : 0.0;
  if (const auto half = docs ? flash_varlen_type(q, *docs) : std::nullopt) {
    // Documents laid end to end as one [B * T, heads, hd] sequence; cu_seqlens cuts it.
    auto tokens = [&](const torch::Tensor& t) {
      return t.transpose(1, 2).reshape({B * T, n_heads_, head_dim_}).to(*half);
    };
    auto context = std::get<0>(at::_flash_attention_forward(
        tokens(q), tokens(k), tokens(v), docs->cu_seqlens, docs->cu_seqlens, docs->max_seqlen,
        docs->max_seqlen, p, /*is_causal=*/true, /*return_debug_mask=*/false, hooks_.softmax_scale));
    return attn_out(context.reshape({B, T, d}));
  }
  // The library's is_causal aligns the mask top-left; queries after cached keys need it
  // bottom-right (a single new query sees every key and needs none).
  std::optional<torch::Tensor> mask;
  const auto flags = torch::dtype(torch::kBool).device(x.device());
  if (docs) {
    TORCH_CHECK(!reference_, "reference_attention does not take document masks");
    mask = docs->allowed;
  } else if (cache && cache->keys_valid.defined()) {
    TORCH_CHECK(!reference_, "reference_attention does not take padding masks (LayerCache::keys_valid)");
    const auto causal = torch::ones({T, past + T}, flags).tril(past);
    const auto itself = torch::ones({T, past + T}, flags).tril(past).triu(past);
    const auto valid = cache->keys_valid.narrow(1, 0, past + T).view({B, 1, 1, past + T});
    mask = causal.logical_and(valid.logical_or(itself));
  } else if (past > 0 && T > 1) {
    mask = torch::ones({T, past + T}, flags).tril(past);
  }
  auto context =
      reference_ ? reference_attention(q, k, v, p, is_training(), hooks_.softmax_scale)
                 : at::scaled_dot_product_attention(q, k, v, mask, p,
                                                    /*is_causal=*/past == 0 && !mask, hooks_.softmax_scale);
  return attn_out(context.transpose(1, 2).reshape({B, T, d}));
}

}  // namespace siamese::model
