// Pre-Norm with a normalized embedding (SiameseNorm paper, arXiv 2602.08064, Sec. 2.2, the
// "EmbedNorm" control): a parameter-free RMSNorm on the token embeddings, then Pre-Norm,
//   x = RMS(emb);  x = x + F_s(LN_s(x)) for every sublayer s;  out = LN_f(x).
// It tests whether Pre-Norm's depth dilution is only a matter of the stream's starting
// scale: the stream still grows with depth, only from a unit-RMS start.
#include "siamese/model/topology.h"

namespace siamese::model {
namespace {

class PreEmbedNorm : public TopologyImpl {
 public:
  explicit PreEmbedNorm(const config::ModelConfig& cfg) : TopologyImpl(cfg) {
    emb_norm_ = register_module("emb_norm", make_plain_rms_norm(cfg, cfg.d_model));
    add_sublayer_norms({{&norm_, "attn_norm", "ff_norm"}});
    ln_f_ = top_norm("ln_f");
  }

  State begin(torch::Tensor emb) override { return {{"x"}, {emb_norm_(emb)}}; }

  torch::Tensor enter(State& st, int64_t s) override { return norm_[s](st[0]); }

  void leave(State& st, torch::Tensor f, int64_t) override { st[0] = st[0] + f; }

  torch::Tensor finish(State& st) override { return ln_f_(st[0]); }

 private:
  Norm emb_norm_{nullptr};
  SublayerNorms norm_;
  Norm ln_f_{nullptr};
};

}  // namespace

std::shared_ptr<TopologyImpl> make_pre_embednorm(const config::ModelConfig& cfg) {
  return std::make_shared<PreEmbedNorm>(cfg);
}

}  // namespace siamese::model
