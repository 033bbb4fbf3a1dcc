// The speedrun residual recipe: Pre-Norm with learned residual scalars, as nanochat runs it
// (karpathy/nanochat, nanochat/gpt.py: GPT.forward, GPT.init_weights), taken from
// modded-nanogpt's records (KellerJordan/modded-nanogpt: x0 lambdas; backout, PR #138). With x0 the
// RMS-normalized embeddings (nanochat's norm(wte(idx)), weightless), block l reads
//   x = r_l x + a_l x0                       (every block, the first included)
//   x = x + F_s(LN_s(x)) for its two sublayers
// and x_b is x after block floor(L / 2); the head reads
//   out = LN_f(x - b x_b).
// r_l, a_l and b are learned scalars with nanochat's initialisation: r_l falls linearly from
// 1.15 at the first block to 1.05 at the last, a_l from 0.20 to 0.05, b = 0.2. Backout takes
// the low-level features of the first half back out before the head, so that those blocks can
// write what later blocks read without the head having to see it.
//
// The state's streams are "x", "x0" (constant) and, from block floor(L / 2) on, "backout":
// streams, not members, so that a block recomputed for activation checkpointing sees them.
// The scalars are residual-path parameters like the norms' (accounting.h): AdamW, never Muon,
// decayed only with optimizer.decay_norm_and_bias. nanochat's own AdamW groups for them
// (r at 1/100 of the scalar rate, a with beta1 0.96) are not reproduced.
#include <algorithm>
#include <vector>

#include "siamese/model/topology.h"

namespace siamese::model {
namespace {

constexpr const char* kBackout = "backout";

class Speedrun : public TopologyImpl {
 public:
  explicit Speedrun(const config::ModelConfig& cfg) : TopologyImpl(cfg), backout_block_(cfg.n_layers / 2) {
    emb_norm_ = register_module("emb_norm", make_plain_rms_norm(cfg, cfg.d_model));
    add_sublayer_norms({{&norm_, "attn_norm", "ff_norm"}});
    const double last = double(std::max<int64_t>(cfg.n_layers - 1, 1));
    for (int64_t l = 0; l < cfg.n_layers; ++l) {
      resid_.push_back(block_param(l, "resid_lambda", torch::full({1}, 1.15 - 0.10 * double(l) / last)));
      x0_.push_back(block_param(l, "x0_lambda", torch::full({1}, 0.20 - 0.15 * double(l) / last)));
    }
    backout_ = register_parameter("backout_lambda", torch::full({1}, 0.2));
    ln_f_ = top_norm("ln_f");
  }

  State begin(torch::Tensor emb) override {
    auto x0 = emb_norm_(emb);
    return {{"x", "x0"}, {x0, x0}};
  }

  torch::Tensor enter(State& st, int64_t s) override {
    if (is_attention(s)) {
      const int64_t l = layer_of(s);
      st[0] = resid_[l] * st[0] + x0_[l] * st[1];
    }
    return norm_[s](st[0]);
  }

  void leave(State& st, torch::Tensor f, int64_t s) override {
    st[0] = st[0] + f;
    if (!is_attention(s) && layer_of(s) == backout_block_) {
      st.names.emplace_back(kBackout);
      st.streams.push_back(st[0]);
    }
  }

  // Without the backout stream (ForwardOptions::n_blocks stopped before it), nothing is
  // subtracted, as in nanochat when x_backout was never set.
  torch::Tensor finish(State& st) override {
    auto x = st[0];
    if (st.names.back() == kBackout) x = x - backout_ * st.streams.back();
    return ln_f_(x);
  }

 private:
  int64_t backout_block_;
  Norm emb_norm_{nullptr};
  SublayerNorms norm_;
  std::vector<torch::Tensor> resid_, x0_;
  torch::Tensor backout_;
  Norm ln_f_{nullptr};
};

}  // namespace

std::shared_ptr<TopologyImpl> make_speedrun(const config::ModelConfig& cfg) {
  return std::make_shared<Speedrun>(cfg);
}

}  // namespace siamese::model
