// Pre-Norm (Xiong et al. 2020, "On Layer Normalization in the Transformer Architecture",
// arXiv 2002.04745; OLMo's default block with norm_after=False):
//   x = x + F(LN(x)) for every sublayer;  out = LN_f(x).
// LayerNorm Scaling (`lns`; Sun et al. 2025, "The Curse of Depth in Large Language Models",
// arXiv 2502.05795; OLMo-core's `default_scaled` block) is Pre-Norm whose sublayer inputs are
// scaled down by the square root of the 1-based layer index, so that the variance each layer
// adds stops growing with depth and deep layers do not collapse to the identity:
//   x = x + F_s(LN_s(x) / sqrt(l + 1)) for sublayer s of layer l (0-based);  out = LN_f(x).
#include <cmath>

#include "placement_rules.h"
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
    auto h = norm_[s](st[0]);
    return depth_scaled_ ? h * lns_input_scale(layer_of(s)) : h;
  }

  void leave(State& st, torch::Tensor f, int64_t s) override { st[0] = st[0] + f; }

  torch::Tensor finish(State& st) override { return ln_f_(st[0]); }

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
