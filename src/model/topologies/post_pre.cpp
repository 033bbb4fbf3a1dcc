// SiameseNorm with a Post-Norm stream X and a Pre-Norm stream Y (arXiv 2602.08064,
// Algorithm 1 with the paper's normalized input and depth-wise scaling; the official
// Qwen-Applications/SiameseNorm deit-model-siamesenorm.py computes the same per sublayer).
// For sublayer s of layer l, with c_l = sqrt(2(l+1)):
//   X = LN_X(X);   h = LN_in(g * X + LN_Y(Y));   o = F_s(h)
//   X = X + o / c_l;   Y = Y + o
//   out = LN_final(LN_a(X) + LN_b(Y))
// g is the learnable vector gamma (hybrid_pre's c1) and, as there, scales X only where it
// enters attention (g = 1 for the MLP). The streams, their update and the output fusion
// are siamese_streams.h. Ablations (model.siamese): fused_input_norm off drops LN_in;
// depth_scaling and gamma as there.
// Setting LN_X's and LN_a's weights to zero removes X from every input and from the output,
// which leaves a Pre-Norm model on Y (the paper's generalization property, tested in
// tests/model/topologies_test.cpp).
#include "siamese_streams.h"

namespace siamese::model {
namespace {

class PostPre : public SiameseStreams {
 public:
  explicit PostPre(const ModelConfig& cfg) : SiameseStreams(cfg) {
    for (int64_t l = 0; l < cfg.n_layers; ++l)
      for (const std::string f : {"attn", "ff"}) {
        x_norm_.push_back(block_norm(l, f + "_norm"));
        y_norm_.push_back(block_norm(l, f + "_y_norm"));
        if (cfg.siamese.fused_input_norm) input_norm_.push_back(block_norm(l, f + "_input_norm"));
      }
  }

  torch::Tensor enter(State& st, int64_t s) override {
    auto [x, y] = normed(st, s);
    st[0] = x;  // X = LN_X(X)
    auto fused = is_attention(s) ? gamma_x_plus(x, y, layer_of(s)) : x + y;
    return input_norm_.empty() ? fused : input_norm_[s](fused);
  }

 protected:
  StreamNorms input_norms(int64_t s) override { return {x_norm_[s], y_norm_[s]}; }

 private:
  std::vector<Norm> x_norm_, y_norm_, input_norm_;  // indexed by sublayer s
};

}  // namespace

std::shared_ptr<TopologyImpl> make_post_pre(const ModelConfig& cfg) { return std::make_shared<PostPre>(cfg); }

}  // namespace siamese::model
