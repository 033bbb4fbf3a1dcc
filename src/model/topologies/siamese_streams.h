#pragma once
// What the SiameseNorm topologies (hybrid_pre, post_pre; arXiv 2602.08064) share: a
// post-normalized stream X and a Pre-Norm stream Y, both starting at the embeddings.
// Every sublayer's output o of layer l feeds both, X += o / c_l with c_l = sqrt(2(l+1))
// (depth-wise scaling) and Y += o, and the head reads LN_final(LN_f(X) + LN_y_f(Y)).
// A subclass says only how a sublayer's input is formed from the two streams (enter).
// model.siamese: depth_scaling off sets c_l = 1; gamma off drops the learnable vector g
// that scales X where it enters attention.
#include <cmath>

#include "siamese/model/topology.h"

namespace siamese::model {

class SiameseStreams : public TopologyImpl {
 public:
  explicit SiameseStreams(const ModelConfig& cfg) : TopologyImpl(cfg) {
    for (int64_t l = 0; l < cfg.n_layers; ++l) {
      if (cfg.siamese.gamma) gamma_.push_back(block_param(l, "c1", torch::ones({cfg.d_model})));
      inv_depth_.push_back(cfg.siamese.depth_scaling ? 1.0 / std::sqrt(2.0 * (l + 1)) : 1.0);
    }
    ln_f_ = top_norm("ln_f");
    ln_y_f_ = top_norm("ln_y_f");
    ln_final_f_ = top_norm("ln_final_f");
  }

  State begin(torch::Tensor emb) override { return {{"x", "y"}, {emb, emb}}; }

  void leave(State& st, torch::Tensor f, int64_t s) override {
    st[0] = st[0].add(f, inv_depth_[layer_of(s)]);  // one fused kernel for X + f / c_l
    st[1] = st[1] + f;
  }

  torch::Tensor finish(State& st) override { return ln_final_f_(ln_f_(st[0]) + ln_y_f_(st[1])); }

 protected:
  // g * x + y_term for attention's input (one addcmul), x + y_term without gamma.
  torch::Tensor gamma_x_plus(const torch::Tensor& x, const torch::Tensor& y_term, int64_t layer) {
    return gamma_.empty() ? x + y_term : torch::addcmul(y_term, x, gamma_[layer]);
  }

 private:
  std::vector<torch::Tensor> gamma_;
  std::vector<double> inv_depth_;
  Norm ln_f_{nullptr}, ln_y_f_{nullptr}, ln_final_f_{nullptr};
};

}  // namespace siamese::model
