// Post-Norm (Vaswani et al. 2017, "Attention Is All You Need", arXiv 1706.03762; named
// Post-LN by Xiong et al. 2020, arXiv 2002.04745): the norm sits after the residual add,
//   x = LN_s(x + F_s(x)) for every sublayer s;  out = x.
// No final norm: the last sublayer's LN already normalizes what the LM head sees.
// DeepNorm (deepnorm.cpp) is this block with a residual weight alpha and an init gain
// beta, so both are built here; plain Post-Norm is alpha = beta = 1.
#include "placement_rules.h"
#include "siamese/model/topology.h"

namespace siamese::model {

double deepnet_gain(Projection p, double beta) {
  return p == Projection::Query || p == Projection::Key ? 1.0 : beta;
}

namespace {

class PostNorm : public TopologyImpl {
 public:
  PostNorm(const config::ModelConfig& cfg, double alpha, double beta)
      : TopologyImpl(cfg), alpha_(alpha), beta_(beta) {
    add_sublayer_norms({{&norm_, "attn_norm", "ff_norm"}});
  }

  double init_gain(Projection p, int64_t) const override { return deepnet_gain(p, beta_); }

  State begin(torch::Tensor emb) override { return {{"x"}, {emb}}; }

  torch::Tensor enter(State& st, int64_t) override { return st[0]; }

  void leave(State& st, torch::Tensor f, int64_t s) override {
    st[0] = norm_[s](alpha_ == 1.0 ? st[0] + f : alpha_ * st[0] + f);
  }

  torch::Tensor finish(State& st) override { return st[0]; }

 private:
  double alpha_, beta_;
  SublayerNorms norm_;
};

}  // namespace

std::shared_ptr<TopologyImpl> make_scaled_post(const config::ModelConfig& cfg, double alpha, double beta) {
  return std::make_shared<PostNorm>(cfg, alpha, beta);
}

std::shared_ptr<TopologyImpl> make_post(const config::ModelConfig& cfg) {
  return make_scaled_post(cfg, 1.0, 1.0);
}

}  // namespace siamese::model
