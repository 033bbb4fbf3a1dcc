#include "siamese/model/attention.h"

#include <cmath>
#include <limits>

#include "siamese/common/autocast.h"

namespace siamese::model {

int64_t kv_head_count(const config::ModelConfig& cfg) {
  return cfg.multi_query_attention ? 1 : cfg.n_kv_heads.value_or(cfg.n_heads);
}

std::optional<int64_t> attention_window(const config::ModelConfig& cfg, int64_t layer) {
  const auto& pattern = cfg.sliding_window_pattern;
  if (pattern.empty()) return std::nullopt;
  const int64_t w = pattern[size_t(layer) % pattern.size()];
  return w < 0 ? std::nullopt : std::optional<int64_t>(w);
}

namespace {

// [T, S] bool: the key at key_pos[j] is readable from the query at query_pos[i]: not after
// it, and with a window fewer than `window` positions before it.
torch::Tensor readable(const torch::Tensor& query_pos, const torch::Tensor& key_pos,
                       std::optional<int64_t> window) {
  const auto q = query_pos.unsqueeze(1), k = key_pos.unsqueeze(0);
  auto ok = k.le(q);
  if (window) ok = ok.logical_and(k.gt(q - *window));
  return ok;
}

torch::Tensor positions(int64_t from, int64_t to, const torch::Device& device) {
  return torch::arange(from, to, torch::dtype(torch::kLong).device(device));
}

}  // namespace

torch::Tensor reference_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  double dropout_p, bool training, std::optional<double> scale,
                                  std::optional<int64_t> window) {
  const int64_t T = q.size(-2), S = k.size(-2);
  auto scores = torch::matmul(q, k.transpose(-2, -1)) * scale.value_or(1.0 / std::sqrt(double(q.size(-1))));
  const auto allowed = readable(positions(S - T, S, q.device()), positions(0, S, q.device()), window);
  scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
  auto weights = torch::dropout(torch::softmax(scores, -1), dropout_p, training);
  return torch::matmul(weights, v);
}

AttentionImpl::AttentionImpl(const config::ModelConfig& cfg, SublayerHooks hooks,
                             std::optional<int64_t> window)
    : n_heads_(cfg.n_heads),
      n_kv_heads_(kv_head_count(cfg)),
      head_dim_(cfg.d_model / cfg.n_heads),
      full_width_qk_norm_(cfg.attention_layer_norm),
      clip_qkv_(cfg.clip_qkv),
      dropout_(cfg.attention_dropout),
      window_(window),
      hooks_(std::move(hooks)) {
  TORCH_CHECK(!window || *window >= 1, "a sliding window holds at least one position, got ", *window);
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

// The type the flash kernel would run q in: under CUDA autocast the autocast type (the
// kernel is no autocast op, so the cast is ours; q/k norms may hand back float32), else q's
// own. nullopt when the kernel cannot take it: it needs fp16 / bf16 heads of at most 256
// channels, a multiple of 8.
std::optional<at::ScalarType> flash_type(const torch::Tensor& q) {
  if (!q.is_cuda() || q.size(-1) % 8 != 0 || q.size(-1) > 256) return std::nullopt;
  const auto t = matmul_dtype(q);
  if (t != torch::kHalf && t != torch::kBFloat16) return std::nullopt;
  return t;
}

// q, k and v from the projection's output as one autograd node on kernels/qkv_heads.h. Saves
// qkv and the RoPE tables; backward writes qkv's gradient whole.
class QkvHeadsFunction : public torch::autograd::Function<QkvHeadsFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const torch::Tensor& qkv, const torch::Tensor& sin,
                                                const torch::Tensor& cos, const kernels::QkvHeadsSpec& spec) {
    ctx->save_for_backward({qkv, sin, cos});
    ctx->saved_data["heads"] = spec.heads;
    ctx->saved_data["kv_heads"] = spec.kv_heads;
    ctx->saved_data["head_dim"] = spec.head_dim;
    ctx->saved_data["norm"] =
        int64_t(spec.norm[0]) | (int64_t(spec.norm[1]) << 1) | (int64_t(spec.norm[2]) << 2);
    ctx->saved_data["centered"] = spec.centered;
    ctx->saved_data["eps"] = spec.eps;
    ctx->saved_data["rope"] = spec.rope;
    const auto out = kernels::qkv_heads(qkv, spec, sin, cos);
    return {out[0], out[1], out[2]};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    kernels::QkvHeadsSpec spec;
    spec.heads = ctx->saved_data["heads"].toInt();
    spec.kv_heads = ctx->saved_data["kv_heads"].toInt();
    spec.head_dim = ctx->saved_data["head_dim"].toInt();
    const int64_t norm = ctx->saved_data["norm"].toInt();
    for (int p = 0; p < 3; ++p) spec.norm[p] = (norm >> p) & 1;
    spec.centered = ctx->saved_data["centered"].toBool();
    spec.eps = ctx->saved_data["eps"].toDouble();
    spec.rope = ctx->saved_data["rope"].toBool();
    const auto dqkv =
        kernels::qkv_heads_backward(saved[0], spec, saved[1], saved[2], {grads[0], grads[1], grads[2]});
    return {dqkv, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

std::optional<kernels::QkvHeadsSpec> AttentionImpl::fused_heads(const torch::Tensor& qkv,
                                                                const LayerCache* cache,
                                                                const Documents* docs) const {
  // A GPU pass: on the CPU the norms' and RoPE's own vectorised passes stay (tests may take it).
  if (!(qkv.is_cuda() || (qkv.is_cpu() && fused_heads_on_cpu_)) || full_width_qk_norm_ || hooks_.qk ||
      cache || (docs && docs->positions.defined()))
    return std::nullopt;
  if (rope_ && !rope_->full_precision() && qkv.scalar_type() != torch::kFloat) return std::nullopt;
  kernels::QkvHeadsSpec spec;
  spec.heads = n_heads_;
  spec.kv_heads = n_kv_heads_;
  spec.head_dim = head_dim_;
  spec.rope = rope_.has_value();
  std::optional<NormKind> kind;
  const Norm* norms[3] = {&q_norm, &k_norm, &v_norm};
  for (int p = 0; p < 3; ++p) {
    const Norm& n = *norms[p];
    if (n.is_empty()) continue;
    // Weights would need their gradient summed over every head row: those norms stay separate.
    if (n->weight.defined() || n->bias.defined() ||
        (n->kind() != NormKind::RMS && n->kind() != NormKind::LayerNorm) ||
        (kind && (*kind != n->kind() || spec.eps != n->eps())))
      return std::nullopt;
    kind = n->kind();
    spec.norm[p] = true;
    spec.eps = n->eps();
  }
  spec.centered = kind == NormKind::LayerNorm;
  // With nothing to compute, the split's views cost nothing.
  if (!kind && !spec.rope) return std::nullopt;
  if (!kernels::qkv_heads_supports(qkv, spec)) return std::nullopt;
  return spec;
}

std::tuple<torch::Tensor, torch::Tensor, int64_t> AttentionImpl::append(LayerCache& cache,
                                                                        const torch::Tensor& k,
                                                                        const torch::Tensor& v) const {
  const int64_t B = k.size(0), T = k.size(2), past = cache.length;
  TORCH_CHECK(past + T <= cache.capacity, "KV cache of ", cache.capacity, " positions cannot take ",
              past + T);
  const int64_t slots = window_ ? std::min(*window_ - 1, cache.capacity) : cache.capacity;
  if (!cache.k.defined()) {
    cache.k = torch::empty({B, n_kv_heads_, slots, head_dim_}, k.options());
    cache.v = torch::empty({B, n_kv_heads_, slots, head_dim_}, v.options());
  }
  cache.length = past + T;
  if (!window_) {
    cache.k.narrow(2, past, T).copy_(k);
    cache.v.narrow(2, past, T).copy_(v);
    return {cache.k.narrow(2, 0, past + T), cache.v.narrow(2, 0, past + T), 0};
  }
  auto ring = [&](int64_t from, int64_t n) { return positions(from, from + n, k.device()).remainder(slots); };
  // Read the slots before writing: the new positions overwrite ones their own queries read.
  const int64_t kept = std::min(past, slots);
  auto keys = k, values = v;
  if (kept > 0) {
    keys = torch::cat({cache.k.index_select(2, ring(past - kept, kept)), k}, 2);
    values = torch::cat({cache.v.index_select(2, ring(past - kept, kept)), v}, 2);
  }
  if (const int64_t n = std::min(slots, T); n > 0) {
    cache.k.index_copy_(2, ring(past + T - n, n), k.narrow(2, T - n, n));
    cache.v.index_copy_(2, ring(past + T - n, n), v.narrow(2, T - n, n));
  }
  return {keys, values, past - kept};
}

torch::Tensor AttentionImpl::banded(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    double p) const {
  const int64_t T = q.size(2), w = *window_;
  std::vector<torch::Tensor> blocks;
  for (int64_t start = 0; start < T; start += w) {
    const int64_t end = std::min(T, start + w), first = std::max<int64_t>(0, start - w + 1);
    const auto mask = readable(positions(start, end, q.device()), positions(first, end, q.device()), window_);
    blocks.push_back(at::scaled_dot_product_attention(q.narrow(2, start, end - start),
                                                      k.narrow(2, first, end - first),
                                                      v.narrow(2, first, end - first), mask, p,
                                                      /*is_causal=*/false, hooks_.softmax_scale));
  }
  return torch::cat(blocks, 2);
}

torch::Tensor AttentionImpl::project(const torch::Tensor& x) {
  if (!hooks_.separate_qkv) return att_proj(x);
  TORCH_CHECK(x.dim() == 4 && x.size(0) == 3,
              "separate query, key and value inputs come as [3, B, T, d], got ", x.sizes());
  const auto w = qkv_weights();
  const auto b = att_proj->bias.defined() ? att_proj->bias.split_with_sizes(qkv_sizes(), 0)
                                          : std::vector<torch::Tensor>(3);
  return torch::cat(
      {torch::linear(x[0], w[0], b[0]), torch::linear(x[1], w[1], b[1]), torch::linear(x[2], w[2], b[2])},
      -1);
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, LayerCache* cache, const Documents* docs) {
  const int64_t B = x.size(-3), T = x.size(-2), d = n_heads_ * head_dim_;
  auto qkv = project(x);
  if (clip_qkv_) qkv = qkv.clamp(-*clip_qkv_, *clip_qkv_);
  TORCH_CHECK(!(docs && cache), "document masks are for packed training rows, not KV-cache decoding");
  const int64_t past = cache ? cache->length : 0;
  torch::Tensor q, k, v;
  if (const auto spec = fused_heads(qkv, cache, docs)) {
    torch::Tensor sin, cos;
    if (spec->rope) std::tie(sin, cos) = rope_->tables(T, qkv.device());
    const auto prepared = QkvHeadsFunction::apply(qkv, sin, cos, *spec);
    q = prepared[0];
    k = prepared[1];
    v = prepared[2];
  } else {
    auto parts = qkv.split_with_sizes(qkv_sizes(), -1);
    q = parts[0], k = parts[1], v = parts[2];
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
    if (rope_ && docs && docs->positions.defined())
      std::tie(q, k) = rope_->apply(q, k, docs->positions);
    else if (rope_)
      std::tie(q, k) = rope_->apply(q, k, past);
  }
  int64_t first_key = 0;  // position of k's first column
  if (cache) std::tie(k, v, first_key) = append(*cache, k, v);
  if (n_kv_heads_ != n_heads_) {
    // Query head j reads kv head j / (n_heads / n_kv_heads), as OLMo's repeat_interleave.
    k = k.repeat_interleave(n_heads_ / n_kv_heads_, 1);
    v = v.repeat_interleave(n_heads_ / n_kv_heads_, 1);
  }
  const double p = is_training() ? dropout_ : 0.0;
  // The flash kernels' window: keys before and after the query, -1 for unlimited (the
  // kernel's own default); causal attention reads none after.
  const int64_t left = window_ ? *window_ - 1 : -1, right = window_ ? 0 : -1;
  const auto half = flash_type(q);
  if (half && docs && docs->cu_seqlens.defined()) {
    // Documents laid end to end as one [B * T, heads, hd] sequence; cu_seqlens cuts it.
    auto tokens = [&](const torch::Tensor& t) {
      return t.transpose(1, 2).reshape({B * T, n_heads_, head_dim_}).to(*half);
    };
    auto context = std::get<0>(
        at::_flash_attention_forward(tokens(q), tokens(k), tokens(v), docs->cu_seqlens, docs->cu_seqlens,
                                     docs->max_seqlen, docs->max_seqlen, p, /*is_causal=*/true,
                                     /*return_debug_mask=*/false, hooks_.softmax_scale, left, right));
    return attn_out(context.reshape({B, T, d}));
  }
  if (half && window_ && !docs && !cache && !reference_) {
    // SDPA would take the window only as a mask, which rules out its flash and cuDNN kernels.
    auto tokens = [&](const torch::Tensor& t) { return t.transpose(1, 2).to(*half); };
    auto context = std::get<0>(at::_flash_attention_forward(
        tokens(q), tokens(k), tokens(v), std::nullopt, std::nullopt, T, T, p, /*is_causal=*/true,
        /*return_debug_mask=*/false, hooks_.softmax_scale, left, right));
    return attn_out(context.reshape({B, T, d}));
  }
  // The library's is_causal aligns the mask top-left; queries after cached keys need it
  // bottom-right (a single new query sees every key it is handed and needs none).
  std::optional<torch::Tensor> mask;
  const auto device = x.device();
  const bool padded = cache && cache->keys_valid.defined();
  if (docs) {
    TORCH_CHECK(!reference_, "reference_attention does not take document masks");
    mask =
        window_
            ? docs->allowed.logical_and(readable(positions(0, T, device), positions(0, T, device), window_))
            : docs->allowed;
  } else if (padded) {
    TORCH_CHECK(!reference_, "reference_attention does not take padding masks (LayerCache::keys_valid)");
    const auto query_pos = positions(past, past + T, device),
               key_pos = positions(first_key, past + T, device);
    const auto itself = key_pos.unsqueeze(0).eq(query_pos.unsqueeze(1));
    const auto valid = cache->keys_valid.index_select(1, key_pos).view({B, 1, 1, key_pos.size(0)});
    mask = readable(query_pos, key_pos, window_).logical_and(valid.logical_or(itself));
  } else if (T > 1 && (past > 0 || window_) && !reference_) {
    if (window_ && !cache && T > 2 * *window_)
      return attn_out(banded(q, k, v, p).transpose(1, 2).reshape({B, T, d}));
    mask = readable(positions(past, past + T, device), positions(first_key, past + T, device), window_);
  }
  auto context =
      reference_ ? reference_attention(q, k, v, p, is_training(), hooks_.softmax_scale, window_)
                 : at::scaled_dot_product_attention(q, k, v, mask, p,
                                                    /*is_causal=*/past == 0 && !mask, hooks_.softmax_scale);
  return attn_out(context.transpose(1, 2).reshape({B, T, d}));
}

}  // namespace siamese::model
