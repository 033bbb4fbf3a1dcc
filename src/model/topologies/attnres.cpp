// Attention Residuals (Kimi Team 2026, "Attention Residuals", arXiv 2603.15031). The residual
// sum is replaced by softmax attention over depth. With v_0 the embeddings and v_i the output
// of sublayer i-1 (after residual dropout), sublayer s reads (paper eqs. for Full AttnRes)
//   h_s = sum_{i<=s} a_{s,i} v_i,   a_{s,.} = softmax_i(w_s . RMSNorm(v_i))
// and applies F_s(LN_s(h_s)) with its usual pre-norm LN_s. w_s in R^d is a learned pseudo-query,
// one per sublayer after the first (whose only source is v_0), initialised to zero so that
// training starts from the uniform average.
// The head reads the same aggregation with its own pseudo-query w_f over every source, then
// LN_f. RMSNorm here is weightless: a weight g would give (w_s . g) . RMSNorm(v), the same
// family of logits, and with w_s = 0 at init g would get no gradient until w_s moved.
//
// Block AttnRes (model.attnres_block_size = S >= 1): sublayers are grouped into blocks of S
// from the first; the sources are v_0, the sum of each completed block's outputs and the
// partial sum of the current block's outputs (when it has any), so the state holds
// 1 + ceil(2L / S) tensors at most instead of 2L + 1. S = 1 is Full AttnRes, and so is 0.
//
// The state's streams are the sources: "v0" (the embeddings), "v1".."vk" (completed blocks,
// i.e. single outputs in Full AttnRes) and "partial". Sources are kept in the queries' dtype
// (float32 under a bf16 autocast, like a Pre-Norm residual) and the weights are computed
// with the autocast paused, so the mixing stays float32 as mHC's does. Logits are formed as
// (v . w) * rsqrt(mean(v^2) + eps) so that autograd keeps per-source tensors of [B, T], not
// a normalized copy of every source at every sublayer.
#include <algorithm>
#include <string>

#include "siamese/common/autocast.h"
#include "siamese/model/topology.h"

namespace siamese::model {
namespace {

constexpr const char* kPartial = "partial";

class AttentionResiduals : public TopologyImpl {
 public:
  explicit AttentionResiduals(const config::ModelConfig& cfg)
      : TopologyImpl(cfg), block_size_(std::max<int64_t>(cfg.attnres_block_size, 1)) {
    add_sublayer_norms({{&norm_, "attn_norm", "ff_norm"}});
    // The first sublayer has one source, the embeddings, whose weight is 1 whatever its query:
    // it has none.
    query_.emplace_back();
    for (int64_t s = 1; s < 2 * cfg.n_layers; ++s)
      query_.push_back(block_param(layer_of(s), is_attention(s) ? "attn_res_query" : "ff_res_query",
                                   torch::zeros({cfg.d_model})));
    final_query_ = register_parameter("res_query_f", torch::zeros({cfg.d_model}));
    ln_f_ = top_norm("ln_f");
  }

  State begin(torch::Tensor emb) override { return {{"v0"}, {emb.to(final_query_.scalar_type())}}; }

  torch::Tensor enter(State& st, int64_t s) override { return norm_[s](aggregate(st, query_[s])); }

  void leave(State& st, torch::Tensor f, int64_t s) override {
    auto v = f.to(final_query_.scalar_type());
    if (!st.names.empty() && st.names.back() == kPartial) {
      st.streams.back() = st.streams.back() + v;
    } else {
      st.names.emplace_back(kPartial);
      st.streams.push_back(v);
    }
    if ((s + 1) % block_size_ == 0) st.names.back() = "v" + std::to_string(st.names.size() - 1);
  }

  torch::Tensor finish(State& st) override { return ln_f_(aggregate(st, final_query_)); }

 private:
  // sum_i softmax_i(q . RMSNorm(v_i)) v_i over the state's sources; the weights [.., n] are
  // left in the state's mixing record as "attnres".
  torch::Tensor aggregate(State& st, const torch::Tensor& q) {
    if (!q.defined()) {
      st.mixing = {{"attnres", torch::ones_like(st[0].select(-1, 0)).unsqueeze(-1)}};
      return st[0];
    }
    AutocastPause full_precision(q.device().type());
    std::vector<torch::Tensor> logits;
    for (const auto& v : st.streams)
      logits.push_back(torch::matmul(v, q) * torch::rsqrt(v.square().mean(-1) + cfg_.layer_norm_eps));
    auto a = torch::softmax(torch::stack(logits, -1), -1);
    auto h = a.select(-1, 0).unsqueeze(-1) * st[0];
    for (size_t i = 1; i < st.streams.size(); ++i) h = h + a.select(-1, int64_t(i)).unsqueeze(-1) * st[i];
    st.mixing = {{"attnres", a}};
    return h;
  }

  int64_t block_size_;
  SublayerNorms norm_;
  std::vector<torch::Tensor> query_;
  torch::Tensor final_query_;
  Norm ln_f_{nullptr};
};

}  // namespace

std::shared_ptr<TopologyImpl> make_attnres(const config::ModelConfig& cfg) {
  return std::make_shared<AttentionResiduals>(cfg);
}

}  // namespace siamese::model
