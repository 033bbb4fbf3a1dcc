#include "siamese/model/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "siamese/model/attention_call.h"

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
  auto ring = [&](int64_t from, int64_t n) {
    return position_range(from, from + n, k.device()).remainder(slots);
  };
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

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> AttentionImpl::prepare_heads(const torch::Tensor& qkv,
                                                                                     int64_t past,
                                                                                     const LayerCache* cache,
                                                                                     const Documents* docs) {
  const int64_t B = qkv.size(0), T = qkv.size(1);
  if (const auto spec = fused_heads(qkv, cache, docs)) {
    torch::Tensor sin, cos;
    if (spec->rope) std::tie(sin, cos) = rope_->tables(T, qkv.device());
    const auto prepared = QkvHeadsFunction::apply(qkv, sin, cos, *spec);
    return {prepared[0], prepared[1], prepared[2]};
  }
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
  if (rope_ && docs && docs->positions.defined())
    std::tie(q, k) = rope_->apply(q, k, docs->positions);
  else if (rope_)
    std::tie(q, k) = rope_->apply(q, k, past);
  return {q, k, v};
}

torch::Tensor AttentionImpl::max_logit(const torch::Tensor& x) {
  torch::NoGradGuard no_grad;
  auto qkv = project(x);
  if (clip_qkv_) qkv = qkv.clamp(-*clip_qkv_, *clip_qkv_);
  auto [q, k, v] = prepare_heads(qkv, 0, nullptr, nullptr);
  if (n_kv_heads_ != n_heads_) k = k.repeat_interleave(n_heads_ / n_kv_heads_, 1);
  const double scale = hooks_.softmax_scale.value_or(1.0 / std::sqrt(double(head_dim_)));
  const int64_t T = q.size(2), chunk = 256;
  const auto keys = k.to(torch::kFloat).transpose(-1, -2);
  const auto positions = torch::arange(T, q.options().dtype(torch::kLong));
  auto best = torch::full({}, -std::numeric_limits<float>::infinity(), q.options().dtype(torch::kFloat));
  for (int64_t start = 0; start < T; start += chunk) {
    const int64_t n = std::min(chunk, T - start);
    const auto scores = torch::matmul(q.narrow(2, start, n).to(torch::kFloat), keys) * scale;
    const auto ok = readable(positions.narrow(0, start, n), positions, window_);
    best = torch::maximum(
        best, scores.masked_fill(ok.logical_not(), -std::numeric_limits<float>::infinity()).max());
  }
  return best;
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, LayerCache* cache, const Documents* docs) {
  TORCH_CHECK(!(docs && cache), "document masks are for packed training rows, not KV-cache decoding");
  auto qkv = project(x);
  if (clip_qkv_) qkv = qkv.clamp(-*clip_qkv_, *clip_qkv_);
  AttentionCall call;
  call.past = cache ? cache->length : 0;
  std::tie(call.q, call.k, call.v) = prepare_heads(qkv, call.past, cache, docs);
  if (cache) {
    std::tie(call.k, call.v, call.first_key) = append(*cache, call.k, call.v);
    call.keys_valid = cache->keys_valid;
    call.cached = true;
  }
  if (n_kv_heads_ != n_heads_) {
    // Query head j reads kv head j / (n_heads / n_kv_heads), as OLMo's repeat_interleave.
    call.k = call.k.repeat_interleave(n_heads_ / n_kv_heads_, 1);
    call.v = call.v.repeat_interleave(n_heads_ / n_kv_heads_, 1);
  }
  call.window = window_;
  call.docs = docs;
  call.training = is_training();
  call.dropout = call.training ? dropout_ : 0.0;
  call.scale = hooks_.softmax_scale;
  call.reference = reference_;
  return attn_out(run_attention(call));
}

}  // namespace siamese::model
