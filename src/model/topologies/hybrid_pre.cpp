// SiameseNorm with a HybridNorm stream X and a Pre-Norm stream Y (arXiv 2602.08064, the
// paper's main LM; official code Qwen-Applications/SiameseNorm OLMo_model_hybrid_pre.py,
// spelled out in shared/golden/README.md). Per block l, c_l = sqrt(2(l+1)):
//   h = X*c1 + LN_ay(Y);         a = Attn(h)   (no norm on h: Attn has per-head QKV norms)
//   X = X + a/c_l;               Y = Y + a
//   X = LN_ff(X);                u = LN_in(X + LN_fy(Y));  f = FFN(u)
//   X = X + f/c_l;               Y = Y + f
//   out = LN_final(LN_f(X) + LN_yf(Y))
// The streams, their update and the output fusion are siamese_streams.h. Ablations
// (model.siamese): fused_input_norm off drops LN_in; depth_scaling and gamma as there.
#include "siamese_streams.h"

namespace siamese::model {
namespace {

class HybridPre : public SiameseStreams {
 public:
  explicit HybridPre(const ModelConfig& cfg) : SiameseStreams(cfg) {
    for (int64_t l = 0; l < cfg.n_layers; ++l) {
      ff_norm_.push_back(block_norm(l, "ff_norm"));
      attn_y_norm_.push_back(block_norm(l, "attn_y_norm"));
      ff_y_norm_.push_back(block_norm(l, "ff_y_norm"));
      if (cfg.siamese.fused_input_norm) ff_input_norm_.push_back(block_norm(l, "ff_input_norm"));
    }
  }

  torch::Tensor enter(State& st, int64_t s) override {
    const int64_t l = layer_of(s);
    auto [x, y] = normed(st, s);
    if (is_attention(s)) return gamma_x_plus(x, y, l);
    st[0] = x;  // the FFN post-norm replaces X
    auto fused = x + y;
    return ff_input_norm_.empty() ? fused : ff_input_norm_[l](fused);
  }

 protected:
  // Attention: X as it is, LN_ay(Y); FFN: LN_ff(X), LN_fy(Y).
  StreamNorms input_norms(int64_t s) override {
    const int64_t l = layer_of(s);
    if (is_attention(s)) return {Norm(nullptr), attn_y_norm_[l]};
    return {ff_norm_[l], ff_y_norm_[l]};
  }

 private:
  std::vector<Norm> ff_norm_, attn_y_norm_, ff_y_norm_, ff_input_norm_;
};

}  // namespace

std::shared_ptr<TopologyImpl> make_hybrid_pre(const ModelConfig& cfg) {
  return std::make_shared<HybridPre>(cfg);
}

}  // namespace siamese::model
