// HybridNorm* (Zhuo et al. 2025, "HybridNorm: Towards Stable and Efficient Transformer
// Training via Hybrid Normalization", arXiv 2503.04598): HybridNorm whose first block is
// Pre-Norm. Official switch: norm_pos_special_config "_{0:{'attn_norm':True,
// 'ffn_residual':False}}_" (BryceZhuo/HybridNorm), i.e. block 0 normalizes the attention
// input and takes the FFN residual before its norm. Per-head Q/K/V norms stay on in every
// block (model.use_{query,key,value}_norm, which its row in topology_table.h turns on):
//   block 0:   x = x + Attn(LN_a(x));     x = x + FFN(LN_ff(x))
//   block l>0: x = x + Attn(x);           x = LN_ff(x);  x = x + FFN(x)
//   out = LN_f(x).
// The official hybrid_pre code crashes at init on this setting (shared/golden/README.md
// item 3: c1 is a float when attn_norm is on); here block 0 simply has attn_norm instead.
#include "siamese/model/topology.h"

namespace siamese::model {
namespace {

class HybridStar : public TopologyImpl {
 public:
  explicit HybridStar(const config::ModelConfig& cfg) : TopologyImpl(cfg) {
    first_attn_norm_ = block_norm(0, "attn_norm");
    for (int64_t l = 0; l < cfg.n_layers; ++l) ff_norm_.push_back(block_norm(l, "ff_norm"));
    ln_f_ = top_norm("ln_f");
  }

  State begin(torch::Tensor emb) override { return {{"x"}, {emb}}; }

  torch::Tensor enter(State& st, int64_t s) override {
    if (s == 0) return first_attn_norm_(st[0]);
    if (s == 1) return ff_norm_[0](st[0]);
    if (!is_attention(s)) st[0] = ff_norm_[layer_of(s)](st[0]);
    return st[0];
  }

  void leave(State& st, torch::Tensor f, int64_t) override { st[0] = st[0] + f; }

  torch::Tensor finish(State& st) override { return ln_f_(st[0]); }

 private:
  Norm first_attn_norm_{nullptr};
  std::vector<Norm> ff_norm_;
  Norm ln_f_{nullptr};
};

}  // namespace

std::shared_ptr<TopologyImpl> make_hybrid_star(const config::ModelConfig& cfg) {
  return std::make_shared<HybridStar>(cfg);
}

}  // namespace siamese::model
