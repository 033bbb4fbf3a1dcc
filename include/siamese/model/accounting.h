#pragma once
// What a model costs, from its config alone: parameter kinds (optimizer groups), parameter
// counts per component, training FLOPs per token and MFU. Nothing here builds a model.
#include <string>

#include "siamese/config/config.h"

namespace siamese::model {

// How OLMo's optimizer groups a parameter (weight decay applies to Linear only unless
// decay_norm_and_bias / decay_embeddings): decided from our parameter names.
//   Embedding: wte.*, wpe.*;  Bias: any *.bias;  Linear: weights of att_proj, attn_out,
//   ff_proj, ff_out (blocks and head);  Norm: everything else (norm weights, QKV norms,
//   topology-owned vectors such as hybrid_pre's c1).
enum class ParamKind { Embedding, Linear, Norm, Bias };
ParamKind param_kind(const std::string& name);
// A tensor the topology registers itself (TopologyImpl::block_param and the like: mixing
// weights, gains, lambdas), not one of its norms' weights.
bool is_topology_tensor(const std::string& name);

// Parameter counts per component, for `siamese inspect` and the trainer's start-up line.
// Blocks are counted from their shapes (none is built); only the topology is built, since
// each topology decides its own norms and vectors.
struct ParamCounts {
  int64_t embedding = 0;   // wte, wpe, emb_norm
  int64_t attention = 0;   // att_proj, attn_out and the QKV norms
  int64_t mlp = 0;         // ff_proj, ff_out; with block_type moe the router and every expert
  int64_t mlp_active = 0;  // what one token uses: the router, top_k experts, the shared one
  int64_t residual = 0;    // everything the topology owns (residual-path norms, gains)
  int64_t head = 0;        // untied ff_out (0 with weight_tying)
  int64_t total() const { return embedding + attention + mlp + residual + head; }
  int64_t active() const { return embedding + attention + mlp_active + residual + head; }
};
ParamCounts count_parameters(const config::ModelConfig& cfg);

// Training FLOPs per token, PaLM's count (Chowdhery et al. 2022, arXiv 2204.02311, App. B):
// 6 * N + 12 * n_layers * d_model * seq_len, where N is the number of parameters that take
// part in matmuls (all but the input embedding tables; the LM head counts, also when tied)
// and the second term is the attention score and context matmuls (forward 2*2*L*d*T,
// backward twice that). The causal mask is not discounted, as in PaLM and OLMo; a sliding
// layer counts min(seq_len, window) keys per query instead of seq_len. With
// block_type moe, N counts the router and the experts a token runs (top_k and the shared
// one), not the idle ones, so MFU is measured on active FLOPs.
double flops_per_token(const config::ModelConfig& cfg, int64_t seq_len);

// Model FLOPs utilisation, 0..1: the share of `peak_flops` (FLOP/s) used by training at
// `tokens_per_second` with flops_per_token FLOPs per token.
double mfu(double tokens_per_second, double flops_per_token, double peak_flops);

// Bytes that training the model holds at least, from its shapes alone (no topology built,
// so it is cheap and safe at absurd sizes): float32 weights, gradients and AdamW's two
// moments, 16 bytes per parameter of the embeddings, blocks and head. Activations come on
// top. A double, since absurd configs overflow 64-bit integers.
double training_state_bytes(const config::ModelConfig& cfg);
// The same by part, to name the setting that makes a model too large.
struct StateBytes {
  double embedding = 0;  // token and position embeddings, untied head
  double attention = 0;  // every block's Q, K, V and output projections
  double mlp = 0;        // every block's MLP (the router and every expert, for moe)
  double total() const { return embedding + attention + mlp; }
};
StateBytes training_state_parts(const config::ModelConfig& cfg);

}  // namespace siamese::model
