#pragma once
// What mHC (mhc.cpp) and mHC-lite (mhc_lite.cpp) share: the layout and arithmetic of
// transformers' DeepseekV4HyperConnection / DeepseekV4HyperHead (models/deepseek_v4), so that
// their weights load one to one. n = model.hc_rate streams H [B, T, n, d] (hyper_streams.h).
// Per sublayer s, from the flattened streams x = RMS(flatten(H)) (weightless RMSNorm over
// n*d), one projection fn [2n + m, n*d] with bias `base` and three scales gives
//   pre  = sigmoid(scale_0 * x fn_pre  + base_pre) + eps             [.., n]
//   post = post_scale * sigmoid(scale_1 * x fn_post + base_post)     [.., n]
//   comb = mixing(scale_2 * x fn_mix + base_mix)                     [.., n, n], doubly stochastic
//   F's input = LN_s(sum_i pre_i h_i);  H = comb^T H + post^T F      (leave)
// and the head collapses the streams with its own pre weights before LN_f. The subclass says
// how the m mixing logits become comb. All of it runs in the parameters' dtype (float32 under
// a bf16 autocast). Init as transformers': fn ~ N(0, init_std), base = 0, scales = 1.
#include "hyper_streams.h"
#include "siamese/common/autocast.h"

namespace siamese::model {

class ManifoldStreams : public TopologyImpl {
 public:
  ManifoldStreams(const config::ModelConfig& cfg, int64_t mix_logits)
      : TopologyImpl(cfg), n_(cfg.hc_rate), m_(mix_logits) {
    const int64_t flat = n_ * cfg.d_model;
    for (int64_t s = 0; s < 2 * cfg.n_layers; ++s) {
      const int64_t l = layer_of(s);
      const std::string p = is_attention(s) ? "attn_mhc_" : "ff_mhc_";
      Site c;
      c.norm = block_norm(l, is_attention(s) ? "attn_norm" : "ff_norm");
      c.fn = block_param(l, p + "fn", torch::randn({2 * n_ + m_, flat}) * cfg.init_std);
      c.base = block_param(l, p + "base", torch::zeros({2 * n_ + m_}));
      c.scale = block_param(l, p + "scale", torch::ones({3}));
      sites_.push_back(std::move(c));
    }
    head_fn_ = register_parameter("mhc_head_fn", torch::randn({n_, flat}) * cfg.init_std);
    head_base_ = register_parameter("mhc_head_base", torch::zeros({n_}));
    head_scale_ = register_parameter("mhc_head_scale", torch::ones({1}));
    ln_f_ = top_norm("ln_f");
  }

  State begin(torch::Tensor emb) override { return hyper::begin(emb, n_); }

  // Leaves comb^T H in the state and the post weights in its carry.
  torch::Tensor enter(State& st, int64_t s) override {
    auto& c = sites_[s];
    auto h = hyper::stacked(st);
    torch::Tensor input;
    {
      AutocastPause full_precision(h.device().type());
      auto hw = h.to(c.fn.scalar_type());
      auto z = torch::linear(flat_rms(hw), c.fn).split_with_sizes({n_, n_, m_}, -1);
      auto b = c.base.split_with_sizes({n_, n_, m_});
      auto pre = torch::sigmoid(z[0] * c.scale[0] + b[0]) + cfg_.mhc_eps;
      auto post = cfg_.mhc_post_scale * torch::sigmoid(z[1] * c.scale[1] + b[1]);
      auto comb = mixing(z[2] * c.scale[2] + b[2]);
      input = (pre.unsqueeze(-1) * hw).sum(-2).to(h.scalar_type());
      hyper::mix(st, torch::matmul(comb.transpose(-1, -2), hw).to(h.scalar_type()), post);
      st.mixing = {{"pre", pre}, {"post", post}, {"comb", comb}};
    }
    return c.norm(input);
  }

  void leave(State& st, torch::Tensor f, int64_t) override { hyper::leave(st, f, "mhc"); }

  torch::Tensor finish(State& st) override {
    auto h = hyper::stacked(st);
    torch::Tensor out;
    {
      AutocastPause full_precision(h.device().type());
      auto hw = h.to(head_fn_.scalar_type());
      auto pre =
          torch::sigmoid(torch::linear(flat_rms(hw), head_fn_) * head_scale_ + head_base_) + cfg_.mhc_eps;
      out = (pre.unsqueeze(-1) * hw).sum(-2).to(h.scalar_type());
      st.mixing = {{"pre", pre}};
    }
    return ln_f_(out);
  }

 protected:
  // The n x n mixing matrices [.., n, n] from their m logits [.., m].
  virtual torch::Tensor mixing(const torch::Tensor& logits) = 0;

  int64_t n_, m_;

 private:
  // The weightless RMSNorm over all n streams of a token.
  torch::Tensor flat_rms(const torch::Tensor& h) const {
    auto x = h.flatten(-2);
    return x * torch::rsqrt(x.square().mean(-1, true) + cfg_.layer_norm_eps);
  }

  struct Site {
    Norm norm{nullptr};  // the sublayer's own pre-norm, LN_s
    torch::Tensor fn, base, scale;
  };
  std::vector<Site> sites_;
  torch::Tensor head_fn_, head_base_, head_scale_;
  Norm ln_f_{nullptr};
};

}  // namespace siamese::model
