// SiameseNorm with a HybridNorm stream X and a Pre-Norm stream Y (arXiv 2602.08064, the
// paper's main LM; official code Qwen-Applications/SiameseNorm OLMo_model_hybrid_pre.py,
// spelled out in shared/golden/README.md). Per block l, c_l = sqrt(2(l+1)):
//   h = X*c1 + LN_ay(Y);         a = Attn(h)   (no norm on h: Attn has per-head QKV norms)
//   X = X + a/c_l;               Y = Y + a
//   X = LN_ff(X);                u = LN_in(X + LN_fy(Y));  f = FFN(u)
//   X = X + f/c_l;               Y = Y + f
//   out = LN_final(LN_f(X) + LN_yf(Y))
// Ablations (model.siamese): depth_scaling off sets c_l = 1, fused_input_norm off drops
// LN_in, gamma off drops c1 (X enters attention unscaled).
#include <cmath>

#include "siamese/model/topology.h"

namespace siamese::model {
namespace {

class HybridPre : public TopologyImpl {
 public:
  explicit HybridPre(const ModelConfig& cfg) : TopologyImpl(cfg) {
    for (int64_t l = 0; l < cfg.n_layers; ++l) {
      if (cfg.siamese.gamma) c1_.push_back(block_param(l, "c1", torch::ones({cfg.d_model})));
      ff_norm_.push_back(block_norm(l, "ff_norm"));
      attn_y_norm_.push_back(block_norm(l, "attn_y_norm"));
      ff_y_norm_.push_back(block_norm(l, "ff_y_norm"));
      if (cfg.siamese.fused_input_norm) ff_input_norm_.push_back(block_norm(l, "ff_input_norm"));
      depth_.push_back(cfg.siamese.depth_scaling ? std::sqrt(2.0 * (l + 1)) : 1.0);
    }
    ln_f_ = top_norm("ln_f");
    ln_y_f_ = top_norm("ln_y_f");
    ln_final_f_ = top_norm("ln_final_f");
  }

  bool requires_qkv_norm() const override { return true; }

  State begin(torch::Tensor emb) override { return {{"x", "y"}, {emb, emb}}; }

  torch::Tensor enter(State& st, int64_t s) override {
    const int64_t l = layer_of(s);
    auto& x = st[0];
    auto& y = st[1];
    if (is_attention(s)) return (c1_.empty() ? x : x * c1_[l]) + attn_y_norm_[l](y);
    x = ff_norm_[l](x);
    auto fused = x + ff_y_norm_[l](y);
    return ff_input_norm_.empty() ? fused : ff_input_norm_[l](fused);
  }

  void leave(State& st, torch::Tensor f, int64_t s) override {
    st[0] = st[0] + f / depth_[layer_of(s)];
    st[1] = st[1] + f;
  }

  torch::Tensor finish(State& st) override { return ln_final_f_(ln_f_(st[0]) + ln_y_f_(st[1])); }

 private:
  std::vector<torch::Tensor> c1_;
  std::vector<Norm> ff_norm_, attn_y_norm_, ff_y_norm_, ff_input_norm_;
  std::vector<double> depth_;
  Norm ln_f_{nullptr}, ln_y_f_{nullptr}, ln_final_f_{nullptr};
};

}  // namespace

std::shared_ptr<TopologyImpl> make_hybrid_pre(const ModelConfig& cfg) {
  return std::make_shared<HybridPre>(cfg);
}

}  // namespace siamese::model
