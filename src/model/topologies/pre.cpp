// Pre-Norm (Xiong et al. 2020, "On Layer Normalization in the Transformer Architecture",
// arXiv 2002.04745; OLMo's default block with norm_after=False):
//   x = x + F(LN(x)) for every sublayer;  out = LN_f(x).
// LayerNorm Scaling (`lns`; Sun et al. 2025, "The Curse of Depth in Large Language Models",
// arXiv 2502.05795; OLMo-core's `default_scaled` block) is Pre-Norm whose sublayer inputs are
// scaled down by the square root of the 1-based layer index, so that the variance each layer
// adds stops growing with depth and deep layers do not collapse to the identity:
//   x = x + F_s(LN_s(x) / sqrt(l + 1)) for sublayer s of layer l (0-based);  out = LN_f(x).
// Each add and the norm after it (LN_{s+1}, or LN_f) are one fused kernel where it applies.
#include <cmath>

#include "fused_update.h"
#include "placement_rules.h"
#include "siamese/model/stream_update.h"
#include "siamese/model/topology.h"

namespace siamese::model {

double lns_input_scale(int64_t layer) { return 1.0 / std::sqrt(double(layer + 1)); }

namespace {

class PreNorm : public TopologyImpl {
 public:
  PreNorm(const config::ModelConfig& cfg, bool depth_scaled)
      : TopologyImpl(cfg), depth_scaled_(depth_scaled) {
    add_sublayer_norms({{&norm_, "attn_norm", "ff_norm"}});
    ln_f_ = top_norm("ln_f");
  }

  State begin(torch::Tensor emb) override { return {{"x"}, {emb}}; }

  torch::Tensor enter(State& st, int64_t s) override {
    auto h = fused::normed_stream(st, 0, norm_[s]);
    st.normalized.clear();
    return depth_scaled_ ? h * lns_input_scale(layer_of(s)) : h;
  }

  // The add and the norm that reads x next (the next sublayer's, or ln_f) in one pass where
  // the fused kernel applies (fused_update.h).
  void leave(State& st, torch::Tensor f, int64_t s) override {
    Norm& next = s + 1 == 2 * cfg_.n_layers ? ln_f_ : norm_[s + 1];
    st.normalized.clear();
    if (!fused::fits(st[0], {}, f, {&next})) {
      st[0] = st[0] + f;
      return;
    }
    // f joins x's dtype as the separate add would promote it (autocast).
    const auto u = residual_update(st[0], f.to(st[0].scalar_type()), 1.0, fused::spec(next));
    st[0] = u.x;
    fused::keep_normalized(st, 0, next, u.nx);
  }

  torch::Tensor finish(State& st) override {
    auto out = fused::normed_stream(st, 0, ln_f_);
    st.normalized.clear();
    return out;
  }

 private:
  bool depth_scaled_;
  SublayerNorms norm_;
  Norm ln_f_{nullptr};
};

}  // namespace

std::shared_ptr<TopologyImpl> make_pre(const config::ModelConfig& cfg) {
  return std::make_shared<PreNorm>(cfg, false);
}

std::shared_ptr<TopologyImpl> make_lns(const config::ModelConfig& cfg) {
  return std::make_shared<PreNorm>(cfg, true);
}

}  // namespace siamese::model
