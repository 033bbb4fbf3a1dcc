#include "siamese/model/attention_call.h"

#include <cmath>
#include <limits>

#include "siamese/common/autocast.h"

namespace siamese::model {

torch::Tensor readable(const torch::Tensor& query_pos, const torch::Tensor& key_pos,
                       std::optional<int64_t> window) {
  const auto q = query_pos.unsqueeze(1), k = key_pos.unsqueeze(0);
  auto ok = k.le(q);
  if (window) ok = ok.logical_and(k.gt(q - *window));
  return ok;
}

namespace {

int64_t queries(const AttentionCall& c) { return c.q.size(2); }

// [B, H, T, hd] -> [B, T, H * hd].
torch::Tensor merge_heads(const torch::Tensor& context) {
  return context.transpose(1, 2).reshape(
      {context.size(0), context.size(2), context.size(1) * context.size(3)});
}

torch::Tensor sdpa(const AttentionCall& c, const std::optional<torch::Tensor>& mask) {
  return merge_heads(at::scaled_dot_product_attention(c.q, c.k, c.v, mask, c.dropout,
                                                      /*is_causal=*/c.past == 0 && !mask, c.scale));
}

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

// The flash kernels' window: keys before and after the query, -1 for unlimited (the kernel's
// own default); causal attention reads none after.
std::pair<int64_t, int64_t> flash_window(const AttentionCall& c) {
  return c.window ? std::pair<int64_t, int64_t>{*c.window - 1, 0} : std::pair<int64_t, int64_t>{-1, -1};
}

bool varlen_supports(const AttentionCall& c) {
  return flash_type(c.q) && c.docs && c.docs->cu_seqlens.defined();
}

// Documents laid end to end as one [B * T, heads, hd] sequence; cu_seqlens cuts it.
torch::Tensor varlen_run(const AttentionCall& c) {
  const int64_t B = c.q.size(0), H = c.q.size(1), T = queries(c), hd = c.q.size(3);
  const auto half = *flash_type(c.q);
  auto tokens = [&](const torch::Tensor& t) { return t.transpose(1, 2).reshape({B * T, H, hd}).to(half); };
  const auto [left, right] = flash_window(c);
  const auto& d = *c.docs;
  auto context = std::get<0>(at::_flash_attention_forward(tokens(c.q), tokens(c.k), tokens(c.v), d.cu_seqlens,
                                                          d.cu_seqlens, d.max_seqlen, d.max_seqlen, c.dropout,
                                                          /*is_causal=*/true, /*return_debug_mask=*/false,
                                                          c.scale, left, right));
  return context.reshape({B, T, H * hd});
}

bool flash_window_supports(const AttentionCall& c) {
  return flash_type(c.q) && c.window && !c.docs && !c.cached && !c.reference;
}

// SDPA would take the window only as a mask, which rules out its flash and cuDNN kernels.
torch::Tensor flash_window_run(const AttentionCall& c) {
  const int64_t B = c.q.size(0), H = c.q.size(1), T = queries(c), hd = c.q.size(3);
  const auto half = *flash_type(c.q);
  auto tokens = [&](const torch::Tensor& t) { return t.transpose(1, 2).to(half); };
  const auto [left, right] = flash_window(c);
  auto context = std::get<0>(at::_flash_attention_forward(tokens(c.q), tokens(c.k), tokens(c.v), std::nullopt,
                                                          std::nullopt, T, T, c.dropout, /*is_causal=*/true,
                                                          /*return_debug_mask=*/false, c.scale, left, right));
  return context.reshape({B, T, H * hd});
}

bool documents_supports(const AttentionCall& c) { return c.docs != nullptr; }

torch::Tensor documents_run(const AttentionCall& c) {
  TORCH_CHECK(!c.reference, "reference_attention does not take document masks");
  const int64_t T = queries(c);
  const auto device = c.q.device();
  return sdpa(c, c.window ? c.docs->allowed.logical_and(readable(position_range(0, T, device),
                                                                 position_range(0, T, device), c.window))
                          : c.docs->allowed);
}

bool padded_supports(const AttentionCall& c) { return c.keys_valid.defined(); }

// Each padding query reads only itself, so that its softmax has a key.
torch::Tensor padded_run(const AttentionCall& c) {
  TORCH_CHECK(!c.reference, "reference_attention does not take padding masks (LayerCache::keys_valid)");
  const int64_t B = c.q.size(0), T = queries(c);
  const auto device = c.q.device();
  const auto query_pos = position_range(c.past, c.past + T, device),
             key_pos = position_range(c.first_key, c.past + T, device);
  const auto itself = key_pos.unsqueeze(0).eq(query_pos.unsqueeze(1));
  const auto valid = c.keys_valid.index_select(1, key_pos).view({B, 1, 1, key_pos.size(0)});
  return sdpa(c, readable(query_pos, key_pos, c.window).logical_and(valid.logical_or(itself)));
}

// The library's is_causal aligns the mask top-left; queries after cached keys need it
// bottom-right, and a window needs a band.
bool masked_supports(const AttentionCall& c) {
  return queries(c) > 1 && (c.past > 0 || c.window) && !c.reference;
}

torch::Tensor masked_run(const AttentionCall& c) {
  const auto device = c.q.device();
  return sdpa(c, readable(position_range(c.past, c.past + queries(c), device),
                          position_range(c.first_key, c.past + queries(c), device), c.window));
}

bool banded_supports(const AttentionCall& c) {
  return masked_supports(c) && c.window && !c.cached && queries(c) > 2 * *c.window;
}

// Queries in blocks of `window` over keys [block start - window + 1, block end).
torch::Tensor banded_run(const AttentionCall& c) {
  const int64_t T = queries(c), w = *c.window;
  const auto device = c.q.device();
  std::vector<torch::Tensor> blocks;
  for (int64_t start = 0; start < T; start += w) {
    const int64_t end = std::min(T, start + w), first = std::max<int64_t>(0, start - w + 1);
    const auto mask =
        readable(position_range(start, end, device), position_range(first, end, device), c.window);
    blocks.push_back(at::scaled_dot_product_attention(c.q.narrow(2, start, end - start),
                                                      c.k.narrow(2, first, end - first),
                                                      c.v.narrow(2, first, end - first), mask, c.dropout,
                                                      /*is_causal=*/false, c.scale));
  }
  return merge_heads(torch::cat(blocks, 2));
}

bool reference_supports(const AttentionCall& c) { return c.reference; }

torch::Tensor reference_run(const AttentionCall& c) {
  return merge_heads(reference_attention(c.q, c.k, c.v, c.dropout, c.training, c.scale, c.window));
}

bool causal_supports(const AttentionCall&) { return true; }

torch::Tensor causal_run(const AttentionCall& c) { return sdpa(c, std::nullopt); }

}  // namespace

const std::vector<AttentionKernel>& attention_kernels() {
  static const std::vector<AttentionKernel> table = {
      {"flash_varlen", varlen_supports, varlen_run},
      {"flash_window", flash_window_supports, flash_window_run},
      {"sdpa_documents", documents_supports, documents_run},
      {"sdpa_padded", padded_supports, padded_run},
      {"sdpa_banded", banded_supports, banded_run},
      {"sdpa_masked", masked_supports, masked_run},
      {"reference", reference_supports, reference_run},
      {"sdpa_causal", causal_supports, causal_run},
  };
  return table;
}

const AttentionKernel& pick_attention_kernel(const AttentionCall& call) {
  for (const auto& kernel : attention_kernels())
    if (kernel.supports(call)) return kernel;
  TORCH_CHECK(false, "no attention kernel supports the call");  // sdpa_causal takes every call
}

torch::Tensor run_attention(const AttentionCall& call) { return pick_attention_kernel(call).run(call); }

torch::Tensor position_range(int64_t from, int64_t to, const torch::Device& device) {
  return torch::arange(from, to, torch::dtype(torch::kLong).device(device));
}

torch::Tensor reference_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  double dropout_p, bool training, std::optional<double> scale,
                                  std::optional<int64_t> window) {
  const int64_t T = q.size(-2), S = k.size(-2);
  auto scores = torch::matmul(q, k.transpose(-2, -1)) * scale.value_or(1.0 / std::sqrt(double(q.size(-1))));
  const auto allowed =
      readable(position_range(S - T, S, q.device()), position_range(0, S, q.device()), window);
  scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
  auto weights = torch::dropout(torch::softmax(scores, -1), dropout_p, training);
  return torch::matmul(weights, v);
}

}  // namespace siamese::model
