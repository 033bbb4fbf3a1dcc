// SiameseNorm (Li, Han et al. 2026, "SiameseNorm: Breaking the Barrier to Reconciling
// Pre/Post-Norm", arXiv 2602.08064): a Pre-Norm stream Y coupled with a stream X that takes a
// single-stream topology's norm placement (model.siamese.x_stream; the paper's Table 2
// couples Pre-Norm with each variant). Both start at the embeddings; sublayer s of layer l,
// with c_l = sqrt(2(l+1)) (depth-wise scaling), computes
//   [X = N_s(X)]                          X's enter norm, when it replaces X (Post-Norm kind)
//   x_in = k_s N_s(X)  (or X)             X's input term (k_s: LayerNorm Scaling)
//   h = LN_in(g * x_in + LN_Y(Y))         g: the vector gamma (c1), attention only
//   o = F_s(h)
//   X = a_s X + M_s(o) / c_l;  Y = Y + o  (a_s: DeepNorm's alpha; M_s: Peri-LN's output norm)
//   out = LN_final(LN_f(X) + LN_yf(Y)).
// The placements (x_placement below) say where N_s and M_s sit for each value:
//   post       N_s replaces X before every sublayer (Algorithm 1; post_pre)
//   hybrid     X enters attention as it is (per-head Q/K/V norms inside); N_s = ff_norm
//              replaces X before the FFN, which alone has LN_in (the paper's LM; hybrid_pre,
//              the official OLMo_model_hybrid_pre.py, spelled out in shared/golden/README.md)
//   hybrid_star hybrid with a Pre-Norm first block
//   deepnorm   post with a_s = (2N)^(1/4) and DeepNet's init gain (8N)^(-1/4)
//   mixln      post in the first floor(mixln_alpha L) layers, pre after
//   peri       N_s on X's input only, M_s on F's output before X absorbs it
//   lns        N_s on X's input only, scaled by 1/sqrt(l+1)
//   pre        N_s on X's input only
//   reordered  X enters as it is and M_s = OLMo-2's sublayer output norm (reordered.cpp);
//              attention normalizes Q and K, as that topology's row requires
// A Post-Norm placement normalizes X where it enters the next sublayer (and LN_f, at the
// output), not right after the add: Algorithm 1's form, which the fused update below needs
// and which puts a norm on X everywhere it is read, so that zero X-side norm weights remove
// X from every input and from the output and leave a Pre-Norm model on Y (the paper's
// generalization property, tested for every placement in tests/model/topologies_test.cpp).
// reordered is the exception: OLMo-2's block reads its stream raw, so zeroed X norms leave X
// at the embeddings in every FFN input, and no weights give Pre-Norm back.
// The placements' constants (DeepNorm's alpha and beta, Mix-LN's split, LNS's scale) are
// their single-stream files' (placement_rules.h); each X norm carries the name it has there.
// With RMSNorm or LayerNorm, an update with a_s = 1 and no M_s and the norms that read the streams next
// are one fused kernel (stream_update.h) whose normalized streams wait in State::normalized
// until enter asks for them; anything else takes separate ops.
// model.siamese: depth_scaling off sets c_l = 1; fused_input_norm off drops LN_in; gamma off
// drops g.

#include <algorithm>
#include <cmath>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "fused_update.h"
#include "placement_rules.h"
#include "siamese/common/error.h"
#include "siamese/model/stream_update.h"
#include "siamese/model/topology.h"

namespace siamese::model {
namespace {

// Where X meets sublayer s.
struct XSublayer {
  std::string norm = {};         // N_s's name ("": X enters as it is)
  bool replaces = false;         // X itself becomes N_s(X) (a lazy post-norm)
  double input_scale = 1.0;      // k_s
  bool input_norm = true;        // F's fused input gets LN_in (not where attention normalizes Q/K/V)
  double residual_weight = 1.0;  // a_s
  std::string out_norm = {};     // M_s's name ("": none)
};

struct XPlacement {
  std::vector<XSublayer> sublayers;  // by s
  double init_beta = 1.0;            // DeepNet's gain on value, attention-output and FFN weights
};

XSublayer post_sublayer(const std::string& f) { return {f + "_norm", true}; }
XSublayer pre_sublayer(const std::string& f) { return {f + "_norm", false}; }

// How sublayer f ("attn" or "ff") of block l enters X, one row per placement X can take.
struct XStreamRow {
  config::XStream stream;
  XSublayer (*sublayer)(const std::string& f, int64_t l, const config::ModelConfig& cfg);
  double (*init_beta)(const config::ModelConfig& cfg) = nullptr;  // DeepNet's gain (null: 1)
};

XSublayer hybrid_sublayer(const std::string& f) {
  return f == "attn" ? XSublayer{"", false, 1.0, false} : post_sublayer(f);
}

using config::XStream;
const XStreamRow kXStreams[] = {
    {XStream::Post,
     [](const std::string& f, int64_t, const config::ModelConfig&) { return post_sublayer(f); }},
    {XStream::Hybrid,
     [](const std::string& f, int64_t, const config::ModelConfig&) { return hybrid_sublayer(f); }},
    {XStream::HybridStar,
     [](const std::string& f, int64_t l, const config::ModelConfig&) {
       return l == 0 ? pre_sublayer(f) : hybrid_sublayer(f);
     }},
    {XStream::DeepNorm,
     [](const std::string& f, int64_t, const config::ModelConfig& cfg) {
       XSublayer x = post_sublayer(f);
       x.residual_weight = deepnorm_constants(cfg.n_layers).alpha;
       return x;
     },
     [](const config::ModelConfig& cfg) { return deepnorm_constants(cfg.n_layers).beta; }},
    {XStream::MixLN,
     [](const std::string& f, int64_t l, const config::ModelConfig& cfg) {
       return l < mixln_post_layers(cfg) ? post_sublayer(f) : pre_sublayer(f);
     }},
    {XStream::Peri,
     [](const std::string& f, int64_t, const config::ModelConfig&) {
       XSublayer x = pre_sublayer(f);
       x.out_norm = f + "_out_norm";
       return x;
     }},
    {XStream::LNS,
     [](const std::string& f, int64_t l, const config::ModelConfig&) {
       XSublayer x = pre_sublayer(f);
       x.input_scale = lns_input_scale(l);
       return x;
     }},
    {XStream::Pre, [](const std::string& f, int64_t, const config::ModelConfig&) { return pre_sublayer(f); }},
    {XStream::Reordered,
     [](const std::string& f, int64_t, const config::ModelConfig&) {
       return XSublayer{"", false, 1.0, true, 1.0, f + "_norm"};
     }},
};
// Every placement the schema accepts has its row (XStream::Unset resolves to post first).
static_assert(std::size(kXStreams) == size_t(XStream::Reordered), "one row per x_stream placement");

XPlacement x_placement(XStream stream, const config::ModelConfig& cfg) {
  const auto row = std::find_if(std::begin(kXStreams), std::end(kXStreams),
                                [&](const XStreamRow& r) { return r.stream == stream; });
  TORCH_CHECK(row != std::end(kXStreams), "x_placement: unresolved x_stream");
  XPlacement p;
  for (int64_t l = 0; l < cfg.n_layers; ++l)
    for (const std::string f : {"attn", "ff"}) p.sublayers.push_back(row->sublayer(f, l, cfg));
  if (row->init_beta) p.init_beta = row->init_beta(cfg);
  return p;
}

class Siamese : public TopologyImpl {
 public:
  Siamese(const config::ModelConfig& cfg, XStream x_stream)
      : TopologyImpl(cfg), placement_(x_placement(x_stream, cfg)) {
    for (int64_t l = 0; l < cfg.n_layers; ++l) {
      if (cfg.siamese.gamma) gamma_.push_back(block_param(l, "c1", torch::ones({cfg.d_model})));
      inv_depth_.push_back(cfg.siamese.depth_scaling ? 1.0 / std::sqrt(2.0 * (l + 1)) : 1.0);
    }
    ln_f_ = top_norm("ln_f");
    ln_y_f_ = top_norm("ln_y_f");
    ln_final_f_ = top_norm("ln_final_f");
    // Per block, per sublayer: X's enter norm, Y's, the fused input's, X's output norm.
    auto norm_or_none = [&](int64_t l, const std::string& name) {
      return name.empty() ? Norm(nullptr) : block_norm(l, name);
    };
    for (int64_t s = 0; s < 2 * cfg.n_layers; ++s) {
      const auto& x = placement_.sublayers[s];
      const int64_t l = layer_of(s);
      const std::string f = is_attention(s) ? "attn" : "ff";
      x_norm_.push_back(norm_or_none(l, x.norm));
      y_norm_.push_back(block_norm(l, f + "_y_norm"));
      input_norm_.push_back(
          norm_or_none(l, cfg.siamese.fused_input_norm && x.input_norm ? f + "_input_norm" : ""));
      out_norm_.push_back(norm_or_none(l, x.out_norm));
    }
  }

  double init_gain(Projection p, int64_t) const override { return deepnet_gain(p, placement_.init_beta); }

  State begin(torch::Tensor emb) override { return {{"x", "y"}, {emb, emb}}; }

  torch::Tensor enter(State& st, int64_t s) override {
    const auto& place = placement_.sublayers[s];
    auto [x, y] = normed(st, s);
    if (place.replaces) st[0] = x;
    if (place.input_scale != 1.0) x = x * place.input_scale;
    auto fused = is_attention(s) ? gamma_x_plus(x, y, layer_of(s)) : x + y;
    return input_norm_[s].is_empty() ? fused : input_norm_[s](fused);
  }

  void leave(State& st, torch::Tensor f, int64_t s) override {
    const double alpha = inv_depth_[layer_of(s)];
    const auto& place = placement_.sublayers[s];
    const auto next = norms_at(s + 1);
    st.normalized.clear();
    if (place.residual_weight != 1.0 || !out_norm_[s].is_empty()) {
      const auto x = place.residual_weight == 1.0 ? st[0] : st[0] * place.residual_weight;
      st[0] = x.add(out_norm_[s].is_empty() ? f : out_norm_[s](f), alpha);
      st[1] = st[1] + f;
      return;
    }
    if (!fused::fits(st[0], st[1], f, {&next.x, &next.y})) {
      st[0] = st[0].add(f, alpha);  // one kernel for X + f / c_l
      st[1] = st[1] + f;
      return;
    }
    // f joins the streams' dtype as the separate adds would promote it (autocast).
    const auto u = stream_update(st[0], st[1], f.to(st[0].scalar_type()), alpha, fused::spec(next.x),
                                 fused::spec(next.y));
    st[0] = u.x;
    st[1] = u.y;
    fused::keep_normalized(st, 0, next.x, u.nx);
    fused::keep_normalized(st, 1, next.y, u.ny);
  }

  torch::Tensor finish(State& st) override {
    auto [x, y] = normed(st, 2 * cfg_.n_layers);
    return ln_final_f_(x + y);
  }

 private:
  // The norms applied to X and to Y where they enter sublayer s (2 n_layers: the output
  // fusion); empty: the stream enters as it is.
  struct StreamNorms {
    Norm x{nullptr}, y{nullptr};
  };
  StreamNorms norms_at(int64_t s) {
    return s == 2 * cfg_.n_layers ? StreamNorms{ln_f_, ln_y_f_} : StreamNorms{x_norm_[s], y_norm_[s]};
  }

  // X and Y as sublayer s sees them, each through its norm, taking what the preceding fused
  // update already computed.
  std::pair<torch::Tensor, torch::Tensor> normed(State& st, int64_t s) {
    const auto norms = norms_at(s);
    std::pair<torch::Tensor, torch::Tensor> out{fused::normed_stream(st, 0, norms.x),
                                                fused::normed_stream(st, 1, norms.y)};
    st.normalized.clear();
    return out;
  }

  // g * x + y_term for attention's input (one addcmul), x + y_term without gamma.
  torch::Tensor gamma_x_plus(const torch::Tensor& x, const torch::Tensor& y_term, int64_t layer) {
    return gamma_.empty() ? x + y_term : torch::addcmul(y_term, x, gamma_[layer]);
  }

  XPlacement placement_;
  std::vector<torch::Tensor> gamma_;
  std::vector<double> inv_depth_;
  std::vector<Norm> x_norm_, y_norm_, input_norm_, out_norm_;  // by sublayer s
  Norm ln_f_{nullptr}, ln_y_f_{nullptr}, ln_final_f_{nullptr};
};

// post_pre and hybrid_pre name their placement; model.siamese.x_stream may repeat it.
std::shared_ptr<TopologyImpl> make_fixed(const config::ModelConfig& cfg, const std::string& topology,
                                         XStream x_stream) {
  if (cfg.siamese.x_stream != XStream::Unset && cfg.siamese.x_stream != x_stream)
    throw Error("model.residual " + topology + " couples Pre-Norm with " + config::name_of(x_stream) +
                    ", but model.siamese.x_stream is '" + config::name_of(cfg.siamese.x_stream) + "'",
                "model.siamese.x_stream",
                "use model.residual siamese to choose X's placement with model.siamese.x_stream, or leave "
                "x_stream unset");
  return std::make_shared<Siamese>(cfg, x_stream);
}

}  // namespace

std::shared_ptr<TopologyImpl> make_siamese(const config::ModelConfig& cfg) {
  return std::make_shared<Siamese>(
      cfg, cfg.siamese.x_stream == XStream::Unset ? XStream::Post : cfg.siamese.x_stream);
}

std::shared_ptr<TopologyImpl> make_post_pre(const config::ModelConfig& cfg) {
  return make_fixed(cfg, "post_pre", XStream::Post);
}

std::shared_ptr<TopologyImpl> make_hybrid_pre(const config::ModelConfig& cfg) {
  return make_fixed(cfg, "hybrid_pre", XStream::Hybrid);
}

}  // namespace siamese::model
