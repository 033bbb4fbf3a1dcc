// Pre-Norm (Xiong et al. 2020, "On Layer Normalization in the Transformer Architecture",
// arXiv 2002.04745; OLMo's default block with norm_after=False):
//   x = x + F(LN(x)) for every sublayer;  out = LN_f(x).
#include "siamese/model/topology.h"

namespace siamese::model {
namespace {

class PreNorm : public TopologyImpl {
 public:
  explicit PreNorm(const ModelConfig& cfg) : TopologyImpl(cfg) {
    add_sublayer_norms({{&norm_, "attn_norm", "ff_norm"}});
    ln_f_ = top_norm("ln_f");
  }

  State begin(torch::Tensor emb) override { return {{"x"}, {emb}}; }

  torch::Tensor enter(State& st, int64_t s) override { return norm_[s](st[0]); }

  void leave(State& st, torch::Tensor f, int64_t s) override { st[0] = st[0] + f; }

  torch::Tensor finish(State& st) override { return ln_f_(st[0]); }

 private:
  SublayerNorms norm_;
  Norm ln_f_{nullptr};
};

}  // namespace

std::shared_ptr<TopologyImpl> make_pre(const ModelConfig& cfg) { return std::make_shared<PreNorm>(cfg); }

}  // namespace siamese::model
