// OLMo-2's reordered norm (OLMo 2 Team 2024, "2 OLMo 2 Furious", arXiv 2501.00656; OLMo-core's
// `reordered_norm` block, old OLMo's norm_after=True): the norm moves from the sublayer's input
// to its output, and attention normalizes Q and K over the full projection width
// (model.attention_layer_norm, which its row in topology_table.h turns on):
//   x = x + LN_s(F_s(x)) for every sublayer s;  out = LN_f(x).
// The stream itself is never normalized, as in Pre-Norm, while each update is bounded.
// Hugging Face's Olmo2ForCausalLM computes this block (export writes one, import reads one).
#include "siamese/model/topology.h"

namespace siamese::model {
namespace {

class ReorderedNorm : public TopologyImpl {
 public:
  explicit ReorderedNorm(const config::ModelConfig& cfg) : TopologyImpl(cfg) {
    add_sublayer_norms({{&norm_, "attn_norm", "ff_norm"}});
    ln_f_ = top_norm("ln_f");
  }

  State begin(torch::Tensor emb) override { return {{"x"}, {emb}}; }

  torch::Tensor enter(State& st, int64_t s) override { return st[0]; }

  void leave(State& st, torch::Tensor f, int64_t s) override { st[0] = st[0] + norm_[s](f); }

  torch::Tensor finish(State& st) override { return ln_f_(st[0]); }

 private:
  SublayerNorms norm_;
  Norm ln_f_{nullptr};
};

}  // namespace

std::shared_ptr<TopologyImpl> make_reordered(const config::ModelConfig& cfg) {
  return std::make_shared<ReorderedNorm>(cfg);
}

}  // namespace siamese::model
