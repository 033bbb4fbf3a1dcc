// HybridNorm (Zhuo et al. 2025, "HybridNorm: Towards Stable and Efficient Transformer
// Training via Hybrid Normalization", arXiv 2503.04598; official code
// BryceZhuo/HybridNorm dense_model/olmo/model.py with attn_norm=False, ffn_norm=True,
// ffn_residual_after_norm=True). Attention takes the raw stream and normalizes Q, K, V
// per head inside (model.use_{query,key,value}_norm, which its row in topology_table.h turns on); the FFN is
// post-norm with the residual taken after the norm:
//   x = x + Attn(x);  x = LN(x);  x = x + FFN(x);  out = LN_f(x).
#include "siamese/model/topology.h"

namespace siamese::model {
namespace {

class HybridNorm : public TopologyImpl {
 public:
  explicit HybridNorm(const config::ModelConfig& cfg) : TopologyImpl(cfg) {
    for (int64_t l = 0; l < cfg.n_layers; ++l) ff_norm_.push_back(block_norm(l, "ff_norm"));
    ln_f_ = top_norm("ln_f");
  }

  State begin(torch::Tensor emb) override { return {{"x"}, {emb}}; }

  torch::Tensor enter(State& st, int64_t s) override {
    if (!is_attention(s)) st[0] = ff_norm_[layer_of(s)](st[0]);
    return st[0];
  }

  void leave(State& st, torch::Tensor f, int64_t s) override { st[0] = st[0] + f; }

  torch::Tensor finish(State& st) override { return ln_f_(st[0]); }

 private:
  std::vector<Norm> ff_norm_;
  Norm ln_f_{nullptr};
};

}  // namespace

std::shared_ptr<TopologyImpl> make_hybrid(const config::ModelConfig& cfg) {
  return std::make_shared<HybridNorm>(cfg);
}

}  // namespace siamese::model
