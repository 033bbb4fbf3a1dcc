// Mix-LN (Li et al. 2024, "Mix-LN: Unleashing the Power of Deeper Layers by Combining
// Pre-LN and Post-LN", arXiv 2412.13795): Post-LN in the first floor(alpha * L) layers,
// Pre-LN in the rest (alpha = model.mixln_alpha, the paper's 0.25),
//   layer l <  floor(alpha*L):  x = LN_s(x + F_s(x))
//   layer l >= floor(alpha*L):  x = x + F_s(LN_s(x))
//   out = LN_f(x).
// Post-LN's larger gradients reach the early layers and Pre-LN keeps the deep layers
// trainable, so that neither end of the stack goes unused.
#include <cmath>

#include "placement_rules.h"
#include "siamese/model/topology.h"

namespace siamese::model {

int64_t mixln_post_layers(const config::ModelConfig& cfg) {
  return static_cast<int64_t>(std::floor(cfg.mixln_alpha * cfg.n_layers));
}

namespace {

class MixLN : public TopologyImpl {
 public:
  explicit MixLN(const config::ModelConfig& cfg) : TopologyImpl(cfg) {
    post_layers_ = mixln_post_layers(cfg);
    add_sublayer_norms({{&norm_, "attn_norm", "ff_norm"}});
    ln_f_ = top_norm("ln_f");
  }

  State begin(torch::Tensor emb) override { return {{"x"}, {emb}}; }

  torch::Tensor enter(State& st, int64_t s) override { return is_post(s) ? st[0] : norm_[s](st[0]); }

  void leave(State& st, torch::Tensor f, int64_t s) override {
    st[0] = is_post(s) ? norm_[s](st[0] + f) : st[0] + f;
  }

  torch::Tensor finish(State& st) override { return ln_f_(st[0]); }

 private:
  bool is_post(int64_t s) const { return layer_of(s) < post_layers_; }

  int64_t post_layers_;
  SublayerNorms norm_;
  Norm ln_f_{nullptr};
};

}  // namespace

std::shared_ptr<TopologyImpl> make_mixln(const config::ModelConfig& cfg) {
  return std::make_shared<MixLN>(cfg);
}

}  // namespace siamese::model
