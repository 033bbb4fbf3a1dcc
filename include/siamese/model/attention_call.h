#pragma once
// The attention kernels as one ordered table. AttentionImpl::forward builds one AttentionCall
// after the projection and the head preparation and runs the first row that supports it:
//   flash_varlen     CUDA half heads of packed documents (Documents::cu_seqlens)
//   flash_window     CUDA half heads with a sliding window, no cache, no documents
//   sdpa_documents   packed documents elsewhere: SDPA with Documents::allowed (and the band)
//   sdpa_padded      a KV cache with padding keys (LayerCache::keys_valid)
//   sdpa_banded      rows longer than twice the window: blocks of `window` queries, so that
//                    scores never span T x T
//   sdpa_masked      a window or earlier cached keys: SDPA with the causal band as a mask
//   reference        the plain-ops reference_attention (use_reference_kernel, tests)
//   sdpa_causal      everything else: SDPA's own causal flag
// The order is the precedence: a row is only tried once every row above it declined.
#include <torch/torch.h>

#include <optional>
#include <vector>

#include "siamese/model/documents.h"

namespace siamese::model {

// [T, S] bool: the key at key_pos[j] is readable from the query at query_pos[i]: not after
// it, and with a window fewer than `window` positions before it.
torch::Tensor readable(const torch::Tensor& query_pos, const torch::Tensor& key_pos,
                       std::optional<int64_t> window);

// What every kernel reads: the heads after their norms and RoPE, and where they sit.
struct AttentionCall {
  torch::Tensor q;                  // [B, H, T, hd]
  torch::Tensor k, v;               // [B, H, S, hd], S >= T: key/value heads already repeated to H
  int64_t past = 0;                 // positions before the first query (a KV cache's length)
  int64_t first_key = 0;            // the position of k's first column
  std::optional<int64_t> window;    // positions a query reads, itself included; nullopt: all
  const Documents* docs = nullptr;  // packed rows: a query reads its own document only
  torch::Tensor keys_valid;         // [B, capacity] bool of a KV cache with padding, or undefined
  bool cached = false;              // k and v hold a KV cache's keys
  double dropout = 0;               // the probability to apply (0 outside training)
  bool training = false;
  std::optional<double> scale;  // of the scores; 1/sqrt(hd) when unset
  bool reference = false;       // the plain-ops kernel was asked for
};

struct AttentionKernel {
  const char* name;
  bool (*supports)(const AttentionCall&);
  torch::Tensor (*run)(const AttentionCall&);  // the context, [B, T, H * hd]
};

// The rows above, in order.
const std::vector<AttentionKernel>& attention_kernels();

// The first row that supports `call` (sdpa_causal supports every call).
const AttentionKernel& pick_attention_kernel(const AttentionCall& call);

// pick_attention_kernel(call).run(call).
torch::Tensor run_attention(const AttentionCall& call);

// Positions [from, to) as int64 on `device`.
torch::Tensor position_range(int64_t from, int64_t to, const torch::Device& device);

// softmax(scale q k^T + causal mask) v written out with plain ops, scale 1/sqrt(hd) unless
// given: the reference the fused kernel is tested against. q: [B,H,T,hd]; k, v: [B,H,S,hd]
// (S >= T): the queries are the last T of the S positions (S > T when earlier keys come from
// a KV cache). With a window a query also skips keys `window` or more positions back.
torch::Tensor reference_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  double dropout_p, bool training, std::optional<double> scale = std::nullopt,
                                  std::optional<int64_t> window = std::nullopt);

}  // namespace siamese::model
