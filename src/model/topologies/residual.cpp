// ResiDual (Xie et al. 2023, "ResiDual: Transformer with Dual Residual Connections",
// arXiv 2304.14802), the Pre-Post-LN: a Post-LN stream x feeds every sublayer, and a
// dual stream d sums the raw sublayer outputs the way a Pre-LN residual would,
//   o = F_s(x);  d = d + o;  x = LN_s(x + o);      x starts at the embeddings, d at 0
//   out = x + LN_d(d).
// d gives every sublayer an un-normalized path to the output (the paper's gradient lower
// bound); x keeps the Post-LN representations that do not collapse with depth.
#include "siamese/model/topology.h"

namespace siamese::model {
namespace {

class ResiDual : public TopologyImpl {
 public:
  explicit ResiDual(const config::ModelConfig& cfg) : TopologyImpl(cfg) {
    add_sublayer_norms({{&norm_, "attn_norm", "ff_norm"}});
    ln_d_ = top_norm("ln_d_f");
  }

  State begin(torch::Tensor emb) override { return {{"x", "d"}, {emb, torch::zeros_like(emb)}}; }

  torch::Tensor enter(State& st, int64_t) override { return st[0]; }

  void leave(State& st, torch::Tensor f, int64_t s) override {
    st[1] = st[1] + f;
    st[0] = norm_[s](st[0] + f);
  }

  torch::Tensor finish(State& st) override { return st[0] + ln_d_(st[1]); }

 private:
  SublayerNorms norm_;
  Norm ln_d_{nullptr};
};

}  // namespace

std::shared_ptr<TopologyImpl> make_residual(const config::ModelConfig& cfg) {
  return std::make_shared<ResiDual>(cfg);
}

}  // namespace siamese::model
