// Peri-LN (Kim et al. 2025, "Peri-LN: Revisiting Normalization Layer in the Transformer
// Architecture", arXiv 2502.02732): norms around each sublayer, on its input and on its
// output before the residual add, the identity path itself stays un-normalized,
//   x = x + LN_out_s(F_s(LN_in_s(x))) for every sublayer s;  out = LN_f(x).
// The output norm bounds each sublayer's contribution, so the stream grows about
// linearly in depth instead of Pre-LN's unbounded growth from "massive activations".
#include "siamese/model/topology.h"

namespace siamese::model {
namespace {

class PeriNorm : public TopologyImpl {
 public:
  explicit PeriNorm(const config::ModelConfig& cfg) : TopologyImpl(cfg) {
    add_sublayer_norms({{&in_norm_, "attn_norm", "ff_norm"}, {&out_norm_, "attn_out_norm", "ff_out_norm"}});
    ln_f_ = top_norm("ln_f");
  }

  State begin(torch::Tensor emb) override { return {{"x"}, {emb}}; }

  torch::Tensor enter(State& st, int64_t s) override { return in_norm_[s](st[0]); }

  void leave(State& st, torch::Tensor f, int64_t s) override { st[0] = st[0] + out_norm_[s](f); }

  torch::Tensor finish(State& st) override { return ln_f_(st[0]); }

 private:
  SublayerNorms in_norm_, out_norm_;
  Norm ln_f_{nullptr};
};

}  // namespace

std::shared_ptr<TopologyImpl> make_peri(const config::ModelConfig& cfg) {
  return std::make_shared<PeriNorm>(cfg);
}

}  // namespace siamese::model
