// Hyper-Connections (Zhu et al. 2024, "Hyper-Connections", arXiv 2409.19606), dynamic
// (DHC) with expansion rate n = model.hc_rate (the paper's DHCx2 is n = 2). The residual is
// n streams H = [h_1..h_n] (each [B, T, d], all starting at the embeddings). Sublayer s
// carries a connection matrix [[0, B], [A_m, A_r]] (B: 1 x n, A_m: n x 1, A_r: n x n):
//   input  = A_m(H)^T H                       (width connection: one [B, T, d] input)
//   H      = A_r(H)^T H + B(H)^T F_s(LN_s(input))   (depth connection)
//   out    = LN_f(sum_i h_i).
// Static parts are initialized as the paper prescribes, making a fresh model Pre-Norm:
// A_m = e_{s mod n} (one-hot), A_r = I_n, B = ones. The dynamic parts (model.hc_dynamic)
// add per-token terms from the normalized streams Hn = norm(H):
//   [A_m A_r](H) = s_alpha * tanh(Hn W_alpha) + [A_m A_r],   W_alpha: d x (1 + n)
//   B(H)         = s_beta  * tanh(Hn W_beta)^T + B,           W_beta:  d x 1
// with W = 0 and the learnable scalars s_alpha = s_beta = 0.01 at init. The sublayer
// index s counts attention and MLP separately, as the paper's per-layer connections do.
#include "hyper_streams.h"

namespace siamese::model {
namespace {

class HyperConnections : public TopologyImpl {
 public:
  explicit HyperConnections(const config::ModelConfig& cfg) : TopologyImpl(cfg), n_(cfg.hc_rate) {
    for (int64_t s = 0; s < 2 * cfg.n_layers; ++s) {
      const int64_t l = layer_of(s);
      const std::string p = is_attention(s) ? "attn_hc_" : "ff_hc_";
      Connection c;
      c.norm = block_norm(l, is_attention(s) ? "attn_norm" : "ff_norm");
      auto alpha = torch::zeros({n_, 1 + n_});
      alpha.index_put_({s % n_, 0}, 1.0);
      alpha.narrow(1, 1, n_).copy_(torch::eye(n_));
      c.alpha = block_param(l, p + "alpha", alpha);
      c.beta = block_param(l, p + "beta", torch::ones({n_}));
      if (cfg.hc_dynamic) {
        c.dyn_norm = block_norm(l, p + "norm");
        c.w_alpha = block_param(l, p + "w_alpha", torch::zeros({cfg.d_model, 1 + n_}));
        c.w_beta = block_param(l, p + "w_beta", torch::zeros({cfg.d_model, 1}));
        c.s_alpha = block_param(l, p + "s_alpha", torch::full({1}, 0.01));
        c.s_beta = block_param(l, p + "s_beta", torch::full({1}, 0.01));
      }
      conn_.push_back(std::move(c));
    }
    ln_f_ = top_norm("ln_f");
  }

  State begin(torch::Tensor emb) override { return hyper::begin(emb, n_); }

  // Computes the width connection, leaves A_r(H)^T H in the state and B(H) in its carry.
  torch::Tensor enter(State& st, int64_t s) override {
    auto& c = conn_[s];
    auto h = hyper::stacked(st);  // [B, T, n, d]
    auto alpha = c.alpha;         // [n, 1+n], or [B, T, n, 1+n] when dynamic
    auto beta = c.beta;           // [n],      or [B, T, n]
    if (c.dyn_norm) {
      auto hn = c.dyn_norm(h);
      alpha = alpha + c.s_alpha * torch::tanh(torch::matmul(hn, c.w_alpha));
      beta = beta + c.s_beta * torch::tanh(torch::matmul(hn, c.w_beta)).squeeze(-1);
    }
    auto input = torch::matmul(alpha.select(-1, 0).unsqueeze(-2), h).squeeze(-2);
    auto mixed = torch::matmul(alpha.narrow(-1, 1, n_).transpose(-1, -2), h);
    hyper::mix(st, mixed, beta);
    return c.norm(input);
  }

  void leave(State& st, torch::Tensor f, int64_t) override { hyper::leave(st, f, "hyper-connections"); }

  torch::Tensor finish(State& st) override {
    auto sum = st[0];
    for (int64_t i = 1; i < n_; ++i) sum = sum + st[i];
    return ln_f_(sum);
  }

 private:
  struct Connection {
    Norm norm{nullptr};      // the sublayer's own pre-norm, LN_s
    torch::Tensor alpha;     // static [A_m A_r]
    torch::Tensor beta;      // static B
    Norm dyn_norm{nullptr};  // norm(H) of the dynamic part; null for static HC
    torch::Tensor w_alpha, w_beta, s_alpha, s_beta;
  };

  int64_t n_;
  std::vector<Connection> conn_;
  Norm ln_f_{nullptr};
};

}  // namespace

std::shared_ptr<TopologyImpl> make_hc(const config::ModelConfig& cfg) {
  return std::make_shared<HyperConnections>(cfg);
}

}  // namespace siamese::model
