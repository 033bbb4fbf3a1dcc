#pragma once
// What the SiameseNorm topologies (hybrid_pre, post_pre; arXiv 2602.08064) share: a
// post-normalized stream X and a Pre-Norm stream Y, both starting at the embeddings.
// Every sublayer's output o of layer l feeds both, X += o / c_l with c_l = sqrt(2(l+1))
// (depth-wise scaling) and Y += o, and the head reads LN_final(LN_f(X) + LN_y_f(Y)).
// A subclass says only which norms a sublayer's input applies to the two streams
// (input_norms) and how it forms the input from them (enter).
// With RMSNorm, the update and the norms that come next (the next sublayer's, or the
// output fusion's) are one fused kernel (fused_norm.h) whose normalized streams wait in
// State::normalized until enter asks for them; LayerNorm takes separate ops.
// model.siamese: depth_scaling off sets c_l = 1; gamma off drops the learnable vector g
// that scales X where it enters attention.
#include <cmath>
#include <utility>

#include "siamese/model/fused_norm.h"
#include "siamese/model/topology.h"

namespace siamese::model {

class SiameseStreams : public TopologyImpl {
 public:
  explicit SiameseStreams(const ModelConfig& cfg) : TopologyImpl(cfg) {
    for (int64_t l = 0; l < cfg.n_layers; ++l) {
      if (cfg.siamese.gamma) gamma_.push_back(block_param(l, "c1", torch::ones({cfg.d_model})));
      inv_depth_.push_back(cfg.siamese.depth_scaling ? 1.0 / std::sqrt(2.0 * (l + 1)) : 1.0);
    }
    ln_f_ = top_norm("ln_f");
    ln_y_f_ = top_norm("ln_y_f");
    ln_final_f_ = top_norm("ln_final_f");
  }

  State begin(torch::Tensor emb) override { return {{"x", "y"}, {emb, emb}}; }

  void leave(State& st, torch::Tensor f, int64_t s) override {
    const double alpha = inv_depth_[layer_of(s)];
    const auto next = norms_at(s + 1);
    st.normalized.clear();
    if (!fusable(st, f, next)) {
      st[0] = st[0].add(f, alpha);  // one kernel for X + f / c_l
      st[1] = st[1] + f;
      return;
    }
    // f joins the streams' dtype as the separate adds would promote it (autocast).
    const auto u =
        fused::stream_update(st[0], st[1], f.to(st[0].scalar_type()), alpha, spec(next.x), spec(next.y));
    st[0] = u.x;
    st[1] = u.y;
    keep_normalized(st, 0, next.x, u.nx);
    keep_normalized(st, 1, next.y, u.ny);
  }

  torch::Tensor finish(State& st) override {
    auto [x, y] = normed(st, 2 * cfg_.n_layers);
    return ln_final_f_(x + y);
  }

 protected:
  // The norms applied to X and to Y where they enter sublayer s (empty: the stream enters
  // as it is).
  struct StreamNorms {
    Norm x{nullptr}, y{nullptr};
  };
  virtual StreamNorms input_norms(int64_t s) = 0;

  // X and Y as sublayer s (2 n_layers: the output fusion) sees them, each through its
  // norm, taking what the preceding fused update already computed.
  std::pair<torch::Tensor, torch::Tensor> normed(State& st, int64_t s) {
    const auto norms = norms_at(s);
    std::pair<torch::Tensor, torch::Tensor> out{normed_stream(st, 0, norms.x), normed_stream(st, 1, norms.y)};
    st.normalized.clear();
    return out;
  }

  // g * x + y_term for attention's input (one addcmul), x + y_term without gamma.
  torch::Tensor gamma_x_plus(const torch::Tensor& x, const torch::Tensor& y_term, int64_t layer) {
    return gamma_.empty() ? x + y_term : torch::addcmul(y_term, x, gamma_[layer]);
  }

 private:
  StreamNorms norms_at(int64_t s) {
    return s == 2 * cfg_.n_layers ? StreamNorms{ln_f_, ln_y_f_} : input_norms(s);
  }

  // The fused update covers RMSNorm, streams and f of one shape and device, and a dtype with
  // a kernel that f's does not outrank.
  static bool fusable(const State& st, const torch::Tensor& f, const StreamNorms& next) {
    for (const Norm* n : {&next.x, &next.y})
      if (!n->is_empty() && (*n)->kind() != NormKind::RMS) return false;
    const auto &x = st[0], &y = st[1];
    const auto t = x.scalar_type();
    return fused::supports(x) && y.scalar_type() == t && y.sizes() == x.sizes() && f.sizes() == x.sizes() &&
           y.device() == x.device() && f.device() == x.device() && c10::promoteTypes(t, f.scalar_type()) == t;
  }

  static fused::StreamNormSpec spec(const Norm& n) {
    if (n.is_empty()) return {};
    return {true, n->weight, n->eps()};
  }

  // The norm's output from the fused kernel's normalized stream (its bias added as
  // NormImpl adds it).
  static void keep_normalized(State& st, size_t i, const Norm& n, const torch::Tensor& value) {
    if (n.is_empty()) return;
    st.normalized.push_back({n.get(), st[i], n->bias.defined() ? value + n->bias : value});
  }

  static torch::Tensor normed_stream(const State& st, size_t i, Norm n) {
    if (n.is_empty()) return st[i];
    for (const auto& k : st.normalized)
      if (k.norm == n.get() && k.of.is_same(st[i])) return k.value;
    return n(st[i]);
  }

  std::vector<torch::Tensor> gamma_;
  std::vector<double> inv_depth_;
  Norm ln_f_{nullptr}, ln_y_f_{nullptr}, ln_final_f_{nullptr};
};

}  // namespace siamese::model
