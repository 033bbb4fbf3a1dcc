// SiameseNorm with a Post-Norm stream X and a Pre-Norm stream Y (arXiv 2602.08064,
// Algorithm 1 with the paper's normalized input and depth-wise scaling; the official
// Qwen-Applications/SiameseNorm deit-model-siamesenorm.py computes the same per sublayer).
// Both streams start at the embeddings and every sublayer's output o feeds both. For
// sublayer s of layer l, with c_l = sqrt(2(l+1)):
//   X = LN_X(X);   h = LN_in(g * X + LN_Y(Y));   o = F_s(h)
//   X = X + o / c_l;   Y = Y + o
//   out = LN_final(LN_a(X) + LN_b(Y))
// g is the learnable vector gamma (hybrid_pre's c1) and, as there, scales X only where it
// enters attention (g = 1 for the MLP). Ablations (model.siamese): depth_scaling off sets
// c_l = 1, fused_input_norm off drops LN_in, gamma off drops g.
// Setting LN_X's and LN_a's weights to zero removes X from every input and from the output,
// which leaves a Pre-Norm model on Y (the paper's generalization property, tested in
// tests/model/topologies_test.cpp).
#include <cmath>

#include "siamese/model/topology.h"

namespace siamese::model {
namespace {

class PostPre : public TopologyImpl {
 public:
  explicit PostPre(const ModelConfig& cfg) : TopologyImpl(cfg) {
    for (int64_t l = 0; l < cfg.n_layers; ++l) {
      if (cfg.siamese.gamma) c1_.push_back(block_param(l, "c1", torch::ones({cfg.d_model})));
      for (const char* f : {"attn", "ff"}) {
        const std::string p = f;
        x_norm_.push_back(block_norm(l, p + "_norm"));
        y_norm_.push_back(block_norm(l, p + "_y_norm"));
        if (cfg.siamese.fused_input_norm) input_norm_.push_back(block_norm(l, p + "_input_norm"));
      }
      depth_.push_back(cfg.siamese.depth_scaling ? std::sqrt(2.0 * (l + 1)) : 1.0);
    }
    ln_f_ = top_norm("ln_f");
    ln_y_f_ = top_norm("ln_y_f");
    ln_final_f_ = top_norm("ln_final_f");
  }

  State begin(torch::Tensor emb) override { return {{"x", "y"}, {emb, emb}}; }

  torch::Tensor enter(State& st, int64_t s) override {
    auto& x = st[0];
    x = x_norm_[s](x);
    auto gx = is_attention(s) && !c1_.empty() ? x * c1_[layer_of(s)] : x;
    auto fused = gx + y_norm_[s](st[1]);
    return input_norm_.empty() ? fused : input_norm_[s](fused);
  }

  void leave(State& st, torch::Tensor f, int64_t s) override {
    st[0] = st[0] + f / depth_[layer_of(s)];
    st[1] = st[1] + f;
  }

  torch::Tensor finish(State& st) override { return ln_final_f_(ln_f_(st[0]) + ln_y_f_(st[1])); }

 private:
  std::vector<torch::Tensor> c1_;
  std::vector<Norm> x_norm_, y_norm_, input_norm_;  // indexed by sublayer s
  std::vector<double> depth_;
  Norm ln_f_{nullptr}, ln_y_f_{nullptr}, ln_final_f_{nullptr};
};

}  // namespace

std::shared_ptr<TopologyImpl> make_post_pre(const ModelConfig& cfg) {
  return std::make_shared<PostPre>(cfg);
}

}  // namespace siamese::model
