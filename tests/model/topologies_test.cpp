// Properties of every residual topology (issue 3): forward/backward at several shapes with
// gradients reaching every parameter, float64 finite-difference gradient checks, the
// SiameseNorm generalization property, HybridNorm* training, Post- vs Pre-Norm magnitudes
// with depth, DeepNorm's constants, Mix-LN's layer split and Hyper-Connections' start.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <iostream>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "siamese/common/error.h"
#include "siamese/config/load.h"
#include "siamese/config/schema.h"
#include "siamese/model/lm_loss.h"
#include "siamese/model/topology_table.h"
#include "siamese/model/transformer.h"
#include "support/tiny_configs.h"

namespace siamese::model {
namespace {

struct Shape {
  int64_t d_model, n_heads;
  std::optional<int64_t> n_kv_heads;
  int64_t n_layers, seq_len;
  bool tied;
  std::string norm_type;  // rms | default (LayerNorm with bias)
};

config::ModelConfig tiny_config(const std::string& residual, const Shape& s) {
  config::ModelConfig c =
      siamese::testing::tiny_model(residual, {s.d_model, s.n_heads, s.n_layers, 61, 64, 32});
  c.n_kv_heads = s.n_kv_heads;
  c.mlp_ratio = 4;
  c.rope = true;
  c.layer_norm_type = *config::enum_named<config::LayerNormType>(s.norm_type);
  c.include_bias = s.norm_type != "rms";
  c.weight_tying = s.tied;
  return c;
}

const Shape kSmall{16, 2, std::nullopt, 2, 6, false, "rms"};

torch::Tensor lm_loss(const torch::Tensor& logits, const torch::Tensor& ids) {
  return next_token_nll_sum(logits, ids) / double(ids.size(0) * (ids.size(1) - 1));
}

torch::Tensor random_ids(const config::ModelConfig& c, int64_t batch, int64_t seq, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randint(c.vocab_size, {batch, seq}, torch::kLong);
}

Transformer build(const config::ModelConfig& c, uint64_t seed) {
  torch::manual_seed(seed);
  Transformer m(c);
  m->eval();
  return m;
}

torch::Tensor param(Transformer& m, const std::string& name) {
  auto* p = m->named_parameters().find(name);
  if (!p) throw std::runtime_error("no parameter " + name);
  return *p;
}

void set_(torch::Tensor t, const torch::Tensor& v) {
  torch::NoGradGuard g;
  t.copy_(v);
}

// Every norm weight and topology vector becomes 1 + 0.5 N(0,1) (as the golden recipe does),
// so a norm wired to the wrong place or a dropped gain changes the output.
void randomize_topology(Transformer& m) {
  torch::NoGradGuard g;
  for (auto& p : m->topology().named_parameters())
    if (p.value().dim() == 1 && p.value().numel() > 1)
      p.value().copy_(1.0 + 0.5 * torch::randn_like(p.value()));
}

// DeepCrossAttention's GRN weights start at 1e-2 N(0, 1): make the input-dependent part count.
void perturb_dca(Transformer& m) {
  torch::NoGradGuard g;
  for (auto& p : m->topology().named_parameters())
    if (p.key().find("grn_weight") != std::string::npos) p.value().normal_(0.0, 0.5);
}

// Hyper-Connections' dynamic weights start at 0; give them values so checks exercise them.
void perturb_hc(Transformer& m) {
  torch::NoGradGuard g;
  for (auto& p : m->topology().named_parameters())
    if (p.key().find("_hc_w_") != std::string::npos)
      p.value().normal_(0.0, 0.3);
    else if (p.key().find("_hc_s_") != std::string::npos)
      p.value().fill_(0.5);
}

// Parameters that legitimately get no gradient on a freshly initialized model:
// Hyper-Connections' dynamic terms are s * tanh(norm(H) W) with W = 0, so tanh(.) = 0
// gives d/ds = 0, and d/d norm(H) = s * g W^T = 0 leaves norm(H)'s weight and bias
// without gradient. W itself does get one (norm(H)^T s g). They all get gradients once W
// moves off zero (HyperConnectionsDynamicPartsGetGradientsOnceWMoves).
bool no_grad_at_init(const std::string& topology, const std::string& name) {
  if (topology != "hc") return false;
  return name.find("_hc_s_alpha") != std::string::npos || name.find("_hc_s_beta") != std::string::npos ||
         name.find("_hc_norm.") != std::string::npos;
}

TEST(Topologies, ForwardBackwardEveryTopologyAtSeveralShapes) {
  const std::vector<Shape> shapes = {
      {32, 4, std::nullopt, 2, 8, false, "rms"},  // MHA, untied
      {48, 6, 2, 3, 5, true, "rms"},              // GQA, tied
      {16, 2, 1, 1, 12, false, "default"},        // MQA, one layer, LayerNorm with bias
      {24, 3, std::nullopt, 4, 3, true, "default"},
  };
  for (const auto& name : topology_names()) {
    for (const auto& s : shapes) {
      SCOPED_TRACE(name + " d=" + std::to_string(s.d_model) + " L=" + std::to_string(s.n_layers));
      auto c = tiny_config(name, s);
      auto m = build(c, 7);
      auto ids = random_ids(c, 2, s.seq_len, 11);
      auto logits = m->forward(ids);
      ASSERT_EQ(logits.sizes().vec(), (std::vector<int64_t>{2, s.seq_len, c.embedding_size}));
      ASSERT_TRUE(torch::isfinite(logits).all().item<bool>());
      auto loss = lm_loss(logits, ids);
      loss.backward();
      for (auto& p : m->named_parameters()) {
        const auto& g = p.value().grad();
        ASSERT_TRUE(g.defined()) << p.key() << " is not reached by the loss";
        ASSERT_TRUE(torch::isfinite(g).all().item<bool>()) << p.key();
        const bool zero = g.abs().max().item<double>() == 0.0;
        EXPECT_EQ(zero, no_grad_at_init(name, p.key()))
            << p.key() << (zero ? " gets no gradient" : " unexpectedly gets a gradient");
      }
    }
  }
}

// The table's stream names are the ones probes and analyses see.
TEST(Topologies, TableListsTheStreamsEachTopologyCarries) {
  for (const auto& spec : topologies()) {
    SCOPED_TRACE(spec.name);
    auto c = tiny_config(spec.name, kSmall);
    auto m = build(c, 1);
    std::vector<std::string> seen;
    const Probe probe = [&](int64_t layer, const std::string& stream, const torch::Tensor&) {
      if (layer == -1) seen.push_back(stream);
    };
    ForwardOptions opts;
    opts.probe = &probe;
    m->forward(random_ids(c, 1, 4, 2), opts);
    EXPECT_EQ(seen, spec.streams);
  }
}

// A required setting is enforced: the config with it off is refused, naming the key. The
// key the row names is the schema's key of the member it sets.
TEST(Topologies, EveryRequiredSettingIsEnforced) {
  for (const auto& spec : topologies()) {
    for (const auto& flag : spec.required) {
      SCOPED_TRACE(spec.name + " " + flag.key);
      config::TrainConfig c;
      c.model = tiny_config(spec.name, kSmall);
      EXPECT_EQ(config::schema::train_field(flag.key).member(c), &(c.model.*flag.member));
      c.model.*flag.member = false;
      try {
        check_model_config(c.model);
        ADD_FAILURE() << "accepted with " << flag.key << " off";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(flag.key), std::string::npos) << e.what();
      }
    }
    for (const auto& d : spec.defaults) {
      config::TrainConfig c;
      EXPECT_EQ(config::schema::train_field(d.key).member(c), &(c.model.*d.member))
          << spec.name << " " << d.key;
    }
  }
}

TEST(Topologies, HyperConnectionsDynamicPartsGetGradientsOnceWMoves) {
  auto c = tiny_config("hc", kSmall);
  auto m = build(c, 3);
  perturb_hc(m);
  auto ids = random_ids(c, 2, 6, 5);
  lm_loss(m->forward(ids), ids).backward();
  for (auto& p : m->named_parameters())
    EXPECT_GT(p.value().grad().abs().max().item<double>(), 0.0) << p.key();
}

// Central differences on a sample of every parameter tensor's entries, float64.
// Returns the largest |numeric - analytic| / (1e-6 + |analytic|).
double gradcheck(Transformer& m, const torch::Tensor& ids, double* max_abs_err) {
  m->zero_grad();
  lm_loss(m->forward(ids), ids).backward();
  torch::NoGradGuard guard;
  std::mt19937 rng(0);
  double worst_rel = 0.0, worst_abs = 0.0;
  const double h = 1e-6;
  for (auto& p : m->named_parameters()) {
    auto w = p.value();
    double* data = w.data_ptr<double>();
    const double* grad = w.grad().data_ptr<double>();
    std::uniform_int_distribution<int64_t> pick(0, w.numel() - 1);
    for (int k = 0; k < 4; ++k) {
      const int64_t i = pick(rng);
      const double saved = data[i];
      data[i] = saved + h;
      const double up = lm_loss(m->forward(ids), ids).item<double>();
      data[i] = saved - h;
      const double down = lm_loss(m->forward(ids), ids).item<double>();
      data[i] = saved;
      const double numeric = (up - down) / (2 * h);
      const double err = std::abs(numeric - grad[i]);
      worst_abs = std::max(worst_abs, err);
      worst_rel = std::max(worst_rel, err / (1e-6 + std::abs(grad[i])));
      EXPECT_LT(err, 1e-7 + 1e-5 * std::abs(grad[i])) << p.key() << "[" << i << "]";
    }
  }
  *max_abs_err = worst_abs;
  return worst_rel;
}

TEST(Topologies, FiniteDifferenceGradientsFloat64) {
  // A topology name, or "pre:dyt" for Pre-Norm with that layer_norm_type.
  for (const std::string spec :
       {"post",     "hc",      "post_pre",    "pre",       "hybrid_pre", "residual",     "deepnorm",
        "mixln",    "peri",    "hybrid_star", "reordered", "lns",        "ngpt",         "mhc",
        "mhc_lite", "attnres", "speedrun",    "dca",       "pre:dyt",    "post_pre:derf"}) {
    SCOPED_TRACE(spec);
    const auto colon = spec.find(':');
    const std::string name = spec.substr(0, colon);
    auto c = tiny_config(
        name, {8, 2, std::nullopt, 2, 4, false, colon == std::string::npos ? "rms" : spec.substr(colon + 1)});
    c.mixln_alpha = 0.5;    // one Post-LN and one Pre-LN layer
    c.dca_past_layers = 1;  // dca's head reads y0 and y2, y1 cut
    auto m = build(c, 21);
    m->to(torch::kDouble);
    m->use_reference_attention(true);
    randomize_topology(m);
    if (name == "hc") perturb_hc(m);
    if (name == "dca") perturb_dca(m);
    double abs_err = 0.0;
    const double rel = gradcheck(m, random_ids(c, 2, 4, 9), &abs_err);
    std::cout << "[gradcheck] " << spec << ": max abs err " << abs_err << ", max rel err " << rel << "\n";
  }
}

// SiameseNorm generalizes Pre-Norm (paper Sec. 3). In post_pre, zero LN_X (every
// sublayer's attn_norm / ff_norm on X) and LN_a (ln_f on X): then X = LN_X(X) = 0 enters
// no sublayer input (whatever gamma is) and LN_a(X) = 0 leaves the output, so only the
// Pre-Norm stream Y computes. Its norms stack: the sublayer input is LN_in(LN_Y(Y)) and the
// output LN_final(LN_b(Y)). With LN_Y and LN_b weights 1 (bias 0) the inner norm returns
// a unit-RMS (zero-mean for LayerNorm) vector that the outer norm maps to itself up to eps,
// so LN_in(LN_Y(Y)) = LN_pre(Y) when LN_in carries the Pre-Norm weights, and likewise
// LN_final(LN_b(Y)) = ln_f(Y). Without the fused-input norm, LN_Y itself takes the Pre-Norm
// weights. The match is exact up to the norms' eps (a relative eps / mean(x^2), 2.5e-9 at
// eps = 1e-12 on a fresh model's 0.02-scale embeddings), so the check runs in float64 with
// eps = 1e-30. hybrid_pre's counterpart is Pre-Norm with per-head QKV norms: zero c1
// (X's attention input), ff_norm (X before the FFN) and ln_f, with the same stacking.
void copy_shared_weights(Transformer& from, Transformer& to) {
  for (auto& p : from->named_parameters())
    if (p.key().rfind("topology.", 0) != 0) set_(param(to, p.key()), p.value());
}

torch::Tensor siamese_as_pre(const std::string& name, config::SiameseConfig sw, const std::string& norm,
                             bool zero_x) {
  auto c = tiny_config("pre", {16, 2, std::nullopt, 3, 6, false, norm});
  c.layer_norm_eps = 1e-30;
  c.siamese = sw;
  c.use_query_norm = c.use_key_norm = c.use_value_norm = name == "hybrid_pre";
  auto pre = build(c, 5);
  pre->to(torch::kDouble);
  randomize_topology(pre);
  {
    torch::NoGradGuard g;
    for (auto& p : pre->named_parameters())  // the QKV norms too
      if (p.key().find("_norm.weight") != std::string::npos)
        p.value().copy_(1.0 + 0.5 * torch::randn_like(p.value()));
  }
  c.residual = name;
  auto sn = build(c, 6);
  sn->to(torch::kDouble);
  randomize_topology(sn);  // gamma (c1) stays random in post_pre: zeroed LN_X makes it moot
  copy_shared_weights(pre, sn);
  const bool has_bias = norm != "rms";
  auto assign = [&](const std::string& dst, double w, const std::string& src = "") {
    auto weight = param(sn, "topology." + dst + ".weight");
    set_(weight, src.empty() ? torch::full_like(weight, w) : param(pre, "topology." + src + ".weight"));
    if (has_bias) {
      auto bias = param(sn, "topology." + dst + ".bias");
      set_(bias, src.empty() ? torch::zeros_like(bias) : param(pre, "topology." + src + ".bias"));
    }
  };
  const double x_weight = zero_x ? 0.0 : 1.0;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string b = "blocks." + std::to_string(l) + ".";
    if (name == "post_pre") {
      for (std::string f : {"attn", "ff"}) {
        assign(b + f + "_norm", x_weight);
        if (sw.fused_input_norm) {
          assign(b + f + "_y_norm", 1.0);
          assign(b + f + "_input_norm", 0.0, b + f + "_norm");
        } else {
          assign(b + f + "_y_norm", 0.0, b + f + "_norm");
        }
      }
    } else {
      if (sw.gamma) set_(param(sn, "topology." + b + "c1"), torch::full({c.d_model}, x_weight));
      assign(b + "attn_y_norm", 0.0, b + "attn_norm");
      assign(b + "ff_norm", x_weight);
      if (sw.fused_input_norm) {
        assign(b + "ff_y_norm", 1.0);
        assign(b + "ff_input_norm", 0.0, b + "ff_norm");
      } else {
        assign(b + "ff_y_norm", 0.0, b + "ff_norm");
      }
    }
  }
  assign("ln_f", x_weight);
  assign("ln_y_f", 1.0);
  assign("ln_final_f", 0.0, "ln_f");
  auto ids = random_ids(c, 2, 6, 8);
  torch::NoGradGuard g;
  return (sn->forward(ids) - pre->forward(ids)).abs().max() / pre->forward(ids).abs().max();
}

TEST(Topologies, SiameseNormWithZeroedXStreamComputesPreNorm) {
  for (const std::string name : {"post_pre", "hybrid_pre"})
    for (const std::string norm : {"rms", "default"})
      for (int bits = 0; bits < 8; ++bits) {
        const config::SiameseConfig sw{(bits & 1) != 0, (bits & 2) != 0, (bits & 4) != 0};
        if (name == "hybrid_pre" && !sw.gamma) continue;  // X enters attention unscaled
        SCOPED_TRACE(name + " " + norm + " switches " + std::to_string(bits));
        const double diff = siamese_as_pre(name, sw, norm, true).item<double>();
        EXPECT_LT(diff, 1e-12);
        // The X stream does matter when it is not zeroed (the check can fail).
        EXPECT_GT(siamese_as_pre(name, sw, norm, false).item<double>(), 1e-3);
        if (bits == 7)
          std::cout << "[generalization] " << name << " " << norm
                    << ": max |logit diff| / max |logit| = " << diff << "\n";
      }
}

TEST(Topologies, HybridNormStarBuildsAndTrains) {
  auto c = tiny_config("hybrid_star", {32, 4, std::nullopt, 3, 16, false, "rms"});
  auto m = build(c, 1);
  // Block 0 is Pre-Norm (an attention-input norm); later blocks take the raw stream.
  auto names = m->named_parameters().keys();
  std::set<std::string> keys(names.begin(), names.end());
  EXPECT_TRUE(keys.count("topology.blocks.0.attn_norm.weight"));
  EXPECT_FALSE(keys.count("topology.blocks.1.attn_norm.weight"));
  auto& topo = m->topology();
  auto x = 100.0 * torch::randn({1, 4, c.d_model});
  State st = topo.begin(x);
  auto rms = [](const torch::Tensor& t) { return t.pow(2).mean().sqrt().item<double>(); };
  EXPECT_NEAR(rms(topo.enter(st, 0)), 1.0, 1e-3);  // block 0 attention input normalized
  st = topo.begin(x);
  EXPECT_NEAR(rms(topo.enter(st, 2)), rms(x), 1e-6);  // block 1 attention input raw

  m->train();
  auto ids = random_ids(c, 4, 16, 2);
  torch::optim::AdamW opt(m->parameters(), torch::optim::AdamWOptions(3e-3));
  double first = 0.0, last = 0.0;
  for (int step = 0; step < 30; ++step) {
    opt.zero_grad();
    auto loss = lm_loss(m->forward(ids), ids);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  std::cout << "[hybrid_star] loss " << first << " -> " << last << " in 30 AdamW steps\n";
  EXPECT_TRUE(std::isfinite(last));
  EXPECT_LT(last, 0.5 * first);
}

// Each topology against its formula written out with plain ops. F_s is a fixed random map
// per sublayer and every topology parameter is random, so a norm in the wrong place, a
// missing gain or a wrong depth constant changes the result.
class TopologyFormula : public ::testing::Test {
 protected:
  static constexpr int64_t kD = 8, kLayers = 4;
  static constexpr double kEps = 1e-5;

  void build(const std::string& name, config::SiameseConfig sw = {}, bool hc_dynamic = true,
             int64_t hc_rate = 2) {
    cfg_ = tiny_config(name, {kD, 2, std::nullopt, kLayers, 5, false, "rms"});
    cfg_.mixln_alpha = 0.5;
    cfg_.hc_rate = hc_rate;
    cfg_.hc_dynamic = hc_dynamic;
    cfg_.siamese = sw;
    apply_required_settings(cfg_);  // those of model.siamese.x_stream's placement
    torch::manual_seed(31);
    topo_ = make_topology(cfg_);
    topo_->to(torch::kDouble);
    torch::NoGradGuard g;
    for (auto& p : topo_->named_parameters()) {
      auto& v = p.value();
      if (p.key().find("_hc_s_") != std::string::npos)
        v.fill_(0.5);
      else if (p.key().find("mhc_fn") != std::string::npos ||
               p.key().find("mhc_head_fn") != std::string::npos)
        v.copy_(0.4 * torch::randn_like(v));  // logits of order 1: Sinkhorn has work to do
      else if (p.key().find("_hc_") != std::string::npos)
        v.add_(0.3 * torch::randn_like(v));
      else
        v.copy_(1.0 + 0.5 * torch::randn_like(v));
    }
    for (int64_t s = 0; s < 2 * kLayers; ++s)
      w_.push_back(torch::randn({kD, kD}, torch::kDouble) / std::sqrt(double(kD)));
    emb_ = torch::randn({2, 5, kD}, torch::kDouble);
  }

  torch::Tensor F(const torch::Tensor& h, int64_t s) const { return torch::tanh(h.matmul(w_[s])); }

  torch::Tensor P(const std::string& name) const { return *topo_->named_parameters().find(name); }
  // RMSNorm with the weight of topology norm `name`.
  torch::Tensor rms(const torch::Tensor& x, const std::string& name) const {
    return x / (x.pow(2).mean(-1, true) + kEps).sqrt() * P(name + ".weight");
  }
  static std::string blk(int64_t s, const std::string& attn, const std::string& ff) {
    return "blocks." + std::to_string(s / 2) + "." + (s % 2 == 0 ? attn : ff);
  }

  torch::Tensor run() {
    torch::NoGradGuard g;
    State st = topo_->begin(emb_);
    for (int64_t s = 0; s < 2 * kLayers; ++s) topo_->leave(st, F(topo_->enter(st, s), s), s);
    return topo_->finish(st);
  }

  void expect_matches(const torch::Tensor& want) {
    EXPECT_LT((run() - want).abs().max().item<double>(), 1e-12);
  }

  config::ModelConfig cfg_;
  std::shared_ptr<TopologyImpl> topo_;
  std::vector<torch::Tensor> w_;
  torch::Tensor emb_;
};

TEST_F(TopologyFormula, Post) {
  build("post");
  auto x = emb_;
  for (int64_t s = 0; s < 2 * kLayers; ++s) x = rms(x + F(x, s), blk(s, "attn_norm", "ff_norm"));
  expect_matches(x);
}

TEST_F(TopologyFormula, DeepNorm) {
  build("deepnorm");
  const double alpha = std::pow(2.0 * kLayers, 0.25);
  auto x = emb_;
  for (int64_t s = 0; s < 2 * kLayers; ++s) x = rms(alpha * x + F(x, s), blk(s, "attn_norm", "ff_norm"));
  expect_matches(x);
}

TEST_F(TopologyFormula, ResiDual) {
  build("residual");
  auto x = emb_, d = torch::zeros_like(emb_);
  for (int64_t s = 0; s < 2 * kLayers; ++s) {
    auto o = F(x, s);
    d = d + o;
    x = rms(x + o, blk(s, "attn_norm", "ff_norm"));
  }
  expect_matches(x + rms(d, "ln_d_f"));
}

TEST_F(TopologyFormula, PeriLN) {
  build("peri");
  auto x = emb_;
  for (int64_t s = 0; s < 2 * kLayers; ++s)
    x = x + rms(F(rms(x, blk(s, "attn_norm", "ff_norm")), s), blk(s, "attn_out_norm", "ff_out_norm"));
  expect_matches(rms(x, "ln_f"));
}

TEST_F(TopologyFormula, ReorderedNorm) {
  build("reordered");
  auto x = emb_;
  for (int64_t s = 0; s < 2 * kLayers; ++s) x = x + rms(F(x, s), blk(s, "attn_norm", "ff_norm"));
  expect_matches(rms(x, "ln_f"));
}

TEST_F(TopologyFormula, LayerNormScaling) {
  build("lns");
  auto x = emb_;
  for (int64_t s = 0; s < 2 * kLayers; ++s)
    x = x + F(rms(x, blk(s, "attn_norm", "ff_norm")) / std::sqrt(double(s / 2 + 1)), s);
  expect_matches(rms(x, "ln_f"));
}

TEST_F(TopologyFormula, PreEmbedNorm) {
  build("pre_embednorm");
  auto x = emb_ / (emb_.pow(2).mean(-1, true) + kEps).sqrt();
  for (int64_t s = 0; s < 2 * kLayers; ++s) x = x + F(rms(x, blk(s, "attn_norm", "ff_norm")), s);
  expect_matches(rms(x, "ln_f"));
}

// Block l: x = r_l x + a_l x0 with x0 = RMS(emb), then Pre-Norm; the head subtracts b times
// the residual after block L / 2. Every scalar is random here (1 + 0.5 N(0, 1)).
TEST_F(TopologyFormula, Speedrun) {
  build("speedrun");
  const auto x0 = emb_ / (emb_.pow(2).mean(-1, true) + kEps).sqrt();
  auto x = x0;
  torch::Tensor mid;
  for (int64_t l = 0; l < kLayers; ++l) {
    const std::string b = "blocks." + std::to_string(l) + ".";
    x = P(b + "resid_lambda") * x + P(b + "x0_lambda") * x0;
    x = x + F(rms(x, b + "attn_norm"), 2 * l);
    x = x + F(rms(x, b + "ff_norm"), 2 * l + 1);
    if (l == kLayers / 2) mid = x;
  }
  expect_matches(rms(x - P("backout_lambda") * mid, "ln_f"));
}

TEST_F(TopologyFormula, MixLN) {
  build("mixln");  // alpha 0.5 of 4 layers: layers 0, 1 Post-LN; 2, 3 Pre-LN
  auto x = emb_;
  for (int64_t s = 0; s < 2 * kLayers; ++s) {
    const auto norm = blk(s, "attn_norm", "ff_norm");
    x = s < 4 ? rms(x + F(x, s), norm) : x + F(rms(x, norm), s);
  }
  expect_matches(rms(x, "ln_f"));
}

TEST_F(TopologyFormula, HybridNormStar) {
  build("hybrid_star");
  auto x = emb_;
  x = x + F(rms(x, "blocks.0.attn_norm"), 0);
  x = x + F(rms(x, "blocks.0.ff_norm"), 1);
  for (int64_t s = 2; s < 2 * kLayers; s += 2) {
    x = x + F(x, s);
    x = rms(x, blk(s + 1, "", "ff_norm"));
    x = x + F(x, s + 1);
  }
  expect_matches(rms(x, "ln_f"));
}

TEST_F(TopologyFormula, HyperConnectionsDynamicAndStatic) {
  for (bool dynamic : {true, false}) {
    SCOPED_TRACE(dynamic ? "dynamic" : "static");
    w_.clear();
    build("hc", {}, dynamic);
    const int64_t n = 2;
    std::vector<torch::Tensor> h(n, emb_);
    for (int64_t s = 0; s < 2 * kLayers; ++s) {
      const std::string p = blk(s, "attn_hc_", "ff_hc_");
      auto A = P(p + "alpha"), B = P(p + "beta");  // [n, 1+n], [n]
      std::vector<torch::Tensor> a(n), b(n);       // per stream i: [B,T,1+n] and [B,T,1]
      for (int64_t i = 0; i < n; ++i) {
        a[i] = A[i].expand({2, 5, 1 + n});
        b[i] = B[i].expand({2, 5, 1});
        if (!dynamic) continue;
        auto hn = rms(h[i], p + "norm");
        a[i] = a[i] + P(p + "s_alpha") * torch::tanh(hn.matmul(P(p + "w_alpha")));
        b[i] = b[i] + P(p + "s_beta") * torch::tanh(hn.matmul(P(p + "w_beta")));
      }
      auto input = torch::zeros_like(emb_);
      for (int64_t i = 0; i < n; ++i) input = input + a[i].narrow(-1, 0, 1) * h[i];
      auto o = F(rms(input, blk(s, "attn_norm", "ff_norm")), s);
      std::vector<torch::Tensor> next(n);
      for (int64_t j = 0; j < n; ++j) {
        next[j] = b[j] * o;
        for (int64_t i = 0; i < n; ++i) next[j] = next[j] + a[i].narrow(-1, 1 + j, 1) * h[i];
      }
      h = next;
    }
    expect_matches(rms(h[0] + h[1], "ln_f"));
  }
}

// mHC and mHC-lite written out per stream and per matrix entry: x = RMS(h_0 | .. | h_{n-1}),
// z = x fn^T, pre_i = sigmoid(a_0 z_i + b_i) + eps, post_i = c sigmoid(a_1 z_{n+i} + b_{n+i}),
// the mixing M from the remaining logits, F's input LN_s(sum_i pre_i h_i), and
// h'_k = sum_j M_jk h_j + post_k F; the head collapses the streams with its own pre weights.
class ManifoldFormula : public TopologyFormula {
 protected:
  using Matrix = std::vector<std::vector<torch::Tensor>>;  // [j][k] of [B, T, 1]

  // The logits [B, T, m] of projection `fn` on the normalized streams.
  torch::Tensor logits(const std::vector<torch::Tensor>& h, const torch::Tensor& fn) const {
    auto flat = torch::cat(h, -1);
    auto x = flat / (flat.pow(2).mean(-1, true) + kEps).sqrt();
    return x.matmul(fn.t());
  }

  torch::Tensor expected(const std::string& name, int64_t n) {
    const double eps = cfg_.mhc_eps;
    std::vector<torch::Tensor> h(n, emb_);
    for (int64_t s = 0; s < 2 * kLayers; ++s) {
      const std::string p = blk(s, "attn_mhc_", "ff_mhc_");
      auto z = logits(h, P(p + "fn"));
      auto b = P(p + "base"), a = P(p + "scale");
      auto at = [&](int64_t k, int64_t which) { return a[which] * z.narrow(-1, k, 1) + b[k]; };
      auto input = torch::zeros_like(emb_);
      for (int64_t i = 0; i < n; ++i) input = input + (torch::sigmoid(at(i, 0)) + eps) * h[i];
      auto o = F(rms(input, blk(s, "attn_norm", "ff_norm")), s);
      const Matrix M = name == "mhc" ? sinkhorn(n, [&](int64_t k) { return at(2 * n + k, 2); })
                                     : permutations(n, [&](int64_t k) { return at(2 * n + k, 2); });
      std::vector<torch::Tensor> next(n);
      for (int64_t k = 0; k < n; ++k) {
        next[k] = cfg_.mhc_post_scale * torch::sigmoid(at(n + k, 1)) * o;
        for (int64_t j = 0; j < n; ++j) next[k] = next[k] + M[j][k] * h[j];
      }
      h = next;
    }
    auto z = logits(h, P("mhc_head_fn"));
    auto out = torch::zeros_like(emb_);
    for (int64_t i = 0; i < n; ++i)
      out = out +
            (torch::sigmoid(P("mhc_head_scale") * z.narrow(-1, i, 1) + P("mhc_head_base")[i]) + eps) * h[i];
    return rms(out, "ln_f");
  }

  // exp, then rows and columns normalized in turn (softmax's row normalization first, eps
  // added after it and to every sum), mhc_sinkhorn_iters column normalizations in all.
  Matrix sinkhorn(int64_t n, const std::function<torch::Tensor(int64_t)>& logit) const {
    const double eps = cfg_.mhc_eps;
    Matrix M(n, std::vector<torch::Tensor>(n));
    for (int64_t j = 0; j < n; ++j)
      for (int64_t k = 0; k < n; ++k) M[j][k] = torch::exp(logit(j * n + k));
    for (int64_t t = 0; t < cfg_.mhc_sinkhorn_iters; ++t) {
      for (int64_t j = 0; j < n; ++j) {
        auto sum = M[j][0];
        for (int64_t k = 1; k < n; ++k) sum = sum + M[j][k];
        for (int64_t k = 0; k < n; ++k) M[j][k] = t == 0 ? M[j][k] / sum + eps : M[j][k] / (sum + eps);
      }
      for (int64_t k = 0; k < n; ++k) {
        auto sum = M[0][k];
        for (int64_t j = 1; j < n; ++j) sum = sum + M[j][k];
        for (int64_t j = 0; j < n; ++j) M[j][k] = M[j][k] / (sum + eps);
      }
    }
    return M;
  }

  // sum over the permutations p (lexicographic order) of softmax weight w_p times P_p, whose
  // entry (j, p(j)) is 1.
  Matrix permutations(int64_t n, const std::function<torch::Tensor(int64_t)>& logit) const {
    std::vector<int64_t> perm(n);
    std::iota(perm.begin(), perm.end(), 0);
    std::vector<std::vector<int64_t>> all;
    do all.push_back(perm);
    while (std::next_permutation(perm.begin(), perm.end()));
    auto denom = torch::zeros({2, 5, 1}, torch::kDouble);
    for (size_t k = 0; k < all.size(); ++k) denom = denom + torch::exp(logit(k));
    Matrix M(n, std::vector<torch::Tensor>(n, torch::zeros({2, 5, 1}, torch::kDouble)));
    for (size_t k = 0; k < all.size(); ++k)
      for (int64_t j = 0; j < n; ++j) M[j][all[k][j]] = M[j][all[k][j]] + torch::exp(logit(k)) / denom;
    return M;
  }
};

TEST_F(ManifoldFormula, MhcAtSeveralRatesAndIterationCounts) {
  for (int64_t n : {2, 3, 4}) {
    for (int64_t iters : {1, 3, 20}) {
      for (double post_scale : {2.0, 1.0}) {
        SCOPED_TRACE("n " + std::to_string(n) + " iterations " + std::to_string(iters));
        w_.clear();
        build("mhc", {}, true, n);
        cfg_.mhc_sinkhorn_iters = iters;
        cfg_.mhc_post_scale = post_scale;
        auto params = topo_->named_parameters();
        topo_ = make_topology(cfg_);
        topo_->to(torch::kDouble);
        torch::NoGradGuard g;
        for (auto& p : topo_->named_parameters()) p.value().copy_(*params.find(p.key()));
        expect_matches(expected("mhc", n));
      }
    }
  }
}

TEST_F(ManifoldFormula, MhcLite) {
  for (int64_t n : {2, 3, 4}) {
    SCOPED_TRACE("n " + std::to_string(n));
    w_.clear();
    build("mhc_lite", {}, true, n);
    expect_matches(expected("mhc_lite", n));
  }
}

TEST_F(TopologyFormula, SiameseNormPostPreEverySwitchSetting) {
  for (int bits = 0; bits < 8; ++bits) {
    const config::SiameseConfig sw{(bits & 1) != 0, (bits & 2) != 0, (bits & 4) != 0};
    SCOPED_TRACE("switches " + std::to_string(bits));
    w_.clear();
    build("post_pre", sw);
    auto x = emb_, y = emb_;
    for (int64_t s = 0; s < 2 * kLayers; ++s) {
      const double c = sw.depth_scaling ? std::sqrt(2.0 * (s / 2 + 1)) : 1.0;
      x = rms(x, blk(s, "attn_norm", "ff_norm"));
      auto gx = s % 2 == 0 && sw.gamma ? x * P("blocks." + std::to_string(s / 2) + ".c1") : x;
      auto h = gx + rms(y, blk(s, "attn_y_norm", "ff_y_norm"));
      if (sw.fused_input_norm) h = rms(h, blk(s, "attn_input_norm", "ff_input_norm"));
      auto o = F(h, s);
      x = x + o / c;
      y = y + o;
    }
    expect_matches(rms(rms(x, "ln_f") + rms(y, "ln_y_f"), "ln_final_f"));
  }
}

// nGPT end to end, written out from the paper (arXiv 2410.01131, Sec. 2) with plain ops in
// float64 on a model whose learned scales are all random: q = Norm(W_q h) s_q sqrt(d),
// k likewise, RoPE, softmax(q.k sqrt(head_dim)), h_A = Norm(Attn(h)),
// h = Norm(h + |alpha_A 0.05 sqrt(d)| (h_A - h)); u = s_u W_u h, v = s_v sqrt(d) W_v h,
// h_M = Norm(W_o (u silu(v))), h = Norm(h + |alpha_M 0.05 sqrt(d)| (h_M - h)); logits
// s_z sqrt(d) E h. Norm is taken over the full q/k width (OLMo-core's choice; the paper takes
// it per head) with separate s_q, s_k (the paper shares one s_qk). GQA: 4 query heads, 2 kv.
TEST(NgptFormula, WholeModelFollowsThePapersEquations) {
  const int64_t d = 16, H = 4, Hkv = 2, hd = 4, B = 2, T = 6;
  auto c = tiny_config("ngpt", {d, H, Hkv, 2, T, false, "rms"});
  auto m = build(c, 13);
  m->to(torch::kDouble);
  randomize_topology(m);
  auto P = [&](const std::string& n) { return param(m, n).detach(); };
  auto unit = [](const torch::Tensor& v) { return v / v.norm(2, -1, true); };
  const double r = std::sqrt(double(d));
  // RoPE's tables are float32 in the model too (as OLMo builds them).
  const auto inv_freq = 1.0 / torch::pow(c.rope_theta, torch::arange(0, hd, 2, torch::kFloat) / double(hd));
  const auto angles = torch::outer(torch::arange(T, torch::kFloat), inv_freq).repeat({1, 2});
  const auto cos = angles.cos().to(torch::kDouble), sin = angles.sin().to(torch::kDouble);
  auto rope = [&](const torch::Tensor& t) {
    auto half = t.chunk(2, -1);
    return t * cos + torch::cat({-half[1], half[0]}, -1) * sin;
  };
  auto heads = [&](const torch::Tensor& t, int64_t n) { return t.view({B, T, n, hd}).transpose(1, 2); };
  const auto ids = random_ids(c, B, T, 3);
  auto h = P("wte.weight").index_select(0, ids.flatten()).view({B, T, d});
  const auto future = torch::ones({T, T}, torch::kBool).triu(1);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string b = "blocks." + std::to_string(l) + ".", t = "topology." + b;
    const auto w = P(b + "attn.att_proj.weight").split_with_sizes({d, Hkv * hd, Hkv * hd});
    auto q = rope(heads(unit(torch::linear(h, w[0])) * P(t + "sq") * r, H));
    auto k = rope(heads(unit(torch::linear(h, w[1])) * P(t + "sk") * r, Hkv)).repeat_interleave(H / Hkv, 1);
    auto v = heads(torch::linear(h, w[2]), Hkv).repeat_interleave(H / Hkv, 1);
    auto scores = torch::matmul(q, k.transpose(-1, -2)) * std::sqrt(double(hd));
    auto att = torch::softmax(scores.masked_fill(future, -INFINITY), -1)
                   .matmul(v)
                   .transpose(1, 2)
                   .reshape({B, T, d});
    auto h_a = unit(torch::linear(att, P(b + "attn.attn_out.weight")));
    h = unit(h + (P(t + "attn_alpha") * 0.05 * r).abs() * (h_a - h));
    const auto up = P(b + "mlp.ff_proj.weight").chunk(2, 0);  // value rows, then gate rows
    auto u = torch::linear(h, up[0]) * P(t + "su");
    auto nu = torch::linear(h, up[1]) * P(t + "sv") * r;
    auto h_m = unit(torch::linear(u * torch::silu(nu), P(b + "mlp.ff_out.weight")));
    h = unit(h + (P(t + "ff_alpha") * 0.05 * r).abs() * (h_m - h));
  }
  const auto want = torch::linear(h, P("ff_out.weight")) * P("topology.sz") * r;
  torch::NoGradGuard g;
  const double diff = (m->forward(ids) - want).abs().max().item<double>();
  std::cout << "[ngpt formula] max |logit diff| " << diff << " (max |logit| "
            << want.abs().max().item<double>() << ")\n";
  EXPECT_LT(diff, 1e-12);
}

// A fresh nGPT model starts where the paper (Sec. 2.6) and OLMo-core start: unit-norm
// embedding and head rows, unit-norm input rows of att_proj and ff_proj and output columns of
// attn_out and ff_out; eigen learning rates 0.05, s_q = s_k = s_u = s_v = s_z = 1 in effect
// (stored divided by their restore factors: 1/sqrt(d) for alpha / 0.05, s_q, s_k, s_z).
TEST(NgptFormula, FreshModelStartsOnTheSphereWithThePapersScales) {
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    auto c = tiny_config("ngpt", {32, 4, 2, 2, 4, tied, "rms"});
    auto m = build(c, 2);
    const double inv_sqrt_d = 1.0 / std::sqrt(32.0);
    std::vector<std::pair<std::string, int64_t>> unit_norm = {{"wte.weight", 1}};
    if (!tied) unit_norm.push_back({"ff_out.weight", 1});
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const std::string b = "blocks." + std::to_string(l) + ".";
      unit_norm.insert(unit_norm.end(), {{b + "attn.att_proj.weight", 1},
                                         {b + "attn.attn_out.weight", 0},
                                         {b + "mlp.ff_proj.weight", 1},
                                         {b + "mlp.ff_out.weight", 0}});
      for (const char* s : {"attn_alpha", "ff_alpha", "sq", "sk"})
        EXPECT_TRUE(torch::allclose(param(m, "topology." + b + s), torch::full({1}, inv_sqrt_d))) << s;
      for (const char* s : {"su", "sv"})
        EXPECT_TRUE(torch::equal(param(m, "topology." + b + s), torch::ones({64}))) << s;
    }
    EXPECT_TRUE(torch::allclose(param(m, "topology.sz"), torch::full({1}, inv_sqrt_d)));
    for (const auto& [name, dim] : unit_norm) {
      const double err = (param(m, name).norm(2, dim) - 1).abs().max().item<double>();
      EXPECT_LT(err, 1e-6) << name;
    }
  }
}

// A topology only adds residual-path parameters: everything outside `topology.` is the
// same (names and shapes) as Pre-Norm's with the same attention options, and SiameseNorm's
// additions are only norms (plus the gamma vector c1).
TEST(Topologies, TopologiesOnlyAddResidualPathParameters) {
  const Shape shape{32, 4, std::nullopt, 3, 4, false, "rms"};
  auto shared = [](Transformer& m, bool topology) {
    std::map<std::string, std::vector<int64_t>> out;
    for (auto& p : m->named_parameters())
      if ((p.key().rfind("topology.", 0) == 0) == topology) out[p.key()] = p.value().sizes().vec();
    return out;
  };
  auto count = [](const std::map<std::string, std::vector<int64_t>>& ps) {
    int64_t n = 0;
    for (auto& [k, s] : ps) n += c10::multiply_integers(s);
    return n;
  };
  for (const auto& name : topology_names()) {
    auto c = tiny_config(name, shape);
    auto m = build(c, 1);
    c.residual = "pre";
    auto pre = build(c, 1);
    EXPECT_EQ(shared(m, false), shared(pre, false)) << name;
    const auto own = shared(m, true);
    std::cout << "[params] " << name << ": residual-path parameters " << count(own) << " (" << std::showpos
              << count(own) - count(shared(pre, true)) << std::noshowpos << " vs pre), d=32 L=3\n";
    if (name == "post_pre") {
      for (auto& [k, s] : own)
        EXPECT_TRUE(k.find("_norm.weight") != std::string::npos || k.rfind("topology.ln_", 0) == 0 ||
                    k.find(".c1") != std::string::npos)
            << k;
      // 6 norms per layer (X, Y, fused input; attention and MLP), c1, 3 final norms.
      EXPECT_EQ(count(own), (6 * 3 + 3 + 3) * 32);
    }
  }
}

// Mean L2 norm of stream "x" after each block of a random-init model.
std::vector<double> stream_norms(const std::string& residual, int64_t n_layers) {
  auto c = tiny_config(residual, {64, 4, std::nullopt, n_layers, 32, false, "rms"});
  auto m = build(c, 17);
  std::map<int64_t, double> norms;
  Probe probe = [&](int64_t layer, const std::string& stream, const torch::Tensor& t) {
    if (stream == "x" && layer >= 0 && layer < n_layers) norms[layer] = t.norm(2, -1).mean().item<double>();
  };
  ForwardOptions opts;
  opts.probe = &probe;
  torch::NoGradGuard g;
  m->forward(random_ids(c, 4, 32, 3), opts);
  std::vector<double> out;
  for (auto& [l, v] : norms) out.push_back(v);
  return out;
}

TEST(Topologies, PostNormStaysBoundedWhilePreNormGrowsWithDepth) {
  const auto post = stream_norms("post", 24), pre = stream_norms("pre", 24);
  ASSERT_EQ(post.size(), 24u);
  ASSERT_EQ(pre.size(), 24u);
  const double post_ratio = post.back() / post.front(), pre_ratio = pre.back() / pre.front();
  std::cout << "[magnitude] 24 layers, ||x|| last/first block: post " << post_ratio << " (" << post.front()
            << " -> " << post.back() << "), pre " << pre_ratio << " (" << pre.front() << " -> " << pre.back()
            << ")\n";
  EXPECT_LT(post_ratio, 1.1);
  EXPECT_GT(pre_ratio, 2.0);
  for (size_t l = 1; l < pre.size(); ++l) EXPECT_GT(pre[l], pre[l - 1] * 0.98) << l;
}

TEST(Topologies, DeepNormConstantsFollowThePaper) {
  // Decoder-only DeepNet: alpha = (2N)^(1/4), beta = (8N)^(-1/4).
  const std::map<int64_t, std::pair<double, double>> expected = {
      {6, {1.8612097182041991, 0.37991784282579627}}, {24, {2.6321480259049848, 0.2686424829558855}}};
  for (const auto& [n, ab] : expected) {
    const auto [alpha, beta] = ab;
    auto c = tiny_config("deepnorm", {16, 2, std::nullopt, n, 4, false, "rms"});
    auto topo = make_topology(c);
    EXPECT_DOUBLE_EQ(topo->init_gain(Projection::Query, 0), 1.0);
    EXPECT_DOUBLE_EQ(topo->init_gain(Projection::Key, 0), 1.0);
    for (auto p : {Projection::Value, Projection::AttnOut, Projection::FfProj, Projection::FfOut})
      EXPECT_NEAR(topo->init_gain(p, n - 1), beta, 1e-12);
    // leave computes LN(alpha x + f): compare against a unit-weight RMSNorm by hand.
    auto x = torch::randn({2, 3, 16}, torch::kDouble), f = torch::randn({2, 3, 16}, torch::kDouble);
    topo->to(torch::kDouble);
    State st = topo->begin(x);
    topo->leave(st, f, 0);
    auto z = alpha * x + f;
    auto want = z / (z.pow(2).mean(-1, true) + c.layer_norm_eps).sqrt();
    EXPECT_LT((st[0] - want).abs().max().item<double>(), 1e-12);

    // The model applies beta on top of the init: same seed as Post-Norm, scaled rows.
    c.residual = "post";
    auto post = build(c, 4);
    c.residual = "deepnorm";
    auto deep = build(c, 4);
    for (int64_t l = 0; l < n; ++l) {
      const std::string b = "blocks." + std::to_string(l) + ".";
      auto qkv_post = param(post, b + "attn.att_proj.weight"),
           qkv_deep = param(deep, b + "attn.att_proj.weight");
      EXPECT_TRUE(torch::allclose(qkv_deep.slice(0, 0, 32), qkv_post.slice(0, 0, 32)));   // q, k
      EXPECT_TRUE(torch::allclose(qkv_deep.slice(0, 32), beta * qkv_post.slice(0, 32)));  // v
      for (std::string w : {"attn.attn_out", "mlp.ff_proj", "mlp.ff_out"})
        EXPECT_TRUE(torch::allclose(param(deep, b + w + ".weight"), beta * param(post, b + w + ".weight")))
            << w;
    }
  }
}

TEST(Topologies, MixLNSplitsPostAndPreLayersByAlpha) {
  // {n_layers, alpha, floor(alpha * n_layers)}
  const std::vector<std::tuple<int64_t, double, int64_t>> cases = {{8, 0.25, 2}, {10, 0.25, 2}, {10, 0.3, 3},
                                                                   {4, 0.0, 0},  {4, 1.0, 4},   {7, 0.5, 3}};
  for (const auto& [n, alpha, want] : cases) {
    auto c = tiny_config("mixln", {16, 2, std::nullopt, n, 4, false, "rms"});
    c.mixln_alpha = alpha;
    auto topo = make_topology(c);
    int64_t post_layers = 0;
    for (int64_t l = 0; l < n; ++l) {
      // A Post-LN sublayer hands F the raw stream and normalizes after the add; a Pre-LN
      // one hands F the normalized stream and adds raw.
      auto x = 10.0 * torch::randn({1, 3, 16});
      auto f = torch::randn({1, 3, 16});
      bool post = true;
      for (int64_t s = 2 * l; s < 2 * l + 2; ++s) {
        State st = topo->begin(x);
        const bool raw_in = torch::equal(topo->enter(st, s), x);
        topo->leave(st, f, s);
        const bool normed_out = std::abs(st[0].pow(2).mean().item<double>() - 1.0) < 1e-3;
        EXPECT_EQ(raw_in, normed_out) << "layer " << l;
        if (!torch::equal(st[0], x + f)) {
          EXPECT_TRUE(normed_out);
        }
        post = post && raw_in;
      }
      if (post) {
        EXPECT_EQ(post_layers, l) << "Post-LN layers must come first";
        ++post_layers;
      }
    }
    EXPECT_EQ(post_layers, want) << "L=" << n << " alpha=" << alpha;
  }
  auto c = tiny_config("mixln", kSmall);
  c.mixln_alpha = 1.5;
  EXPECT_THROW(make_topology(c), Error);
}

// With its static initialization (A_m one-hot, A_r = I, B = ones, dynamic W = 0) every
// hyper-stream receives every sublayer output and feeds it on unchanged, so each stream
// equals the Pre-Norm residual, the sublayer input is LN(x) and the output LN_f(n x), i.e.
// LN_f(x) up to eps (hence eps = 1e-30 in float64): a fresh HC model computes the Pre-Norm
// model with the same weights.
TEST(Topologies, HyperConnectionsStartAsPreNorm) {
  for (int64_t rate : {1, 2, 3}) {
    auto c = tiny_config("pre", {16, 2, std::nullopt, 3, 6, false, "rms"});
    c.layer_norm_eps = 1e-30;
    c.hc_rate = rate;
    auto pre = build(c, 12);
    pre->to(torch::kDouble);
    randomize_topology(pre);
    c.residual = "hc";
    auto hc = build(c, 13);
    hc->to(torch::kDouble);
    copy_shared_weights(pre, hc);
    for (auto& p : pre->topology().named_parameters())  // LN_s and ln_f keep their names
      set_(param(hc, "topology." + p.key()), p.value());
    auto ids = random_ids(c, 2, 6, 4);
    torch::NoGradGuard g;
    auto want = pre->forward(ids);
    EXPECT_LT((hc->forward(ids) - want).abs().max().item<double>(), 1e-12 * want.abs().max().item<double>())
        << "rate " << rate;
    perturb_hc(hc);  // dynamic connections make it a different model
    EXPECT_GT((hc->forward(ids) - want).abs().max().item<double>(), 1e-3) << "rate " << rate;
  }
}

// Every placement model.siamese.x_stream gives X (issue 29 item 4).
const std::vector<std::string> kXStreams = {"post", "hybrid", "hybrid_star", "deepnorm", "mixln",
                                            "peri", "lns",    "pre",         "reordered"};
bool hybrid_family(const std::string& x_stream) { return x_stream == "hybrid" || x_stream == "hybrid_star"; }

// The paper's generalization property for every coupling: with the X side's norm weights at
// zero (its enter norms N_s, Peri-LN's output norms, LN_f; and gamma where X enters attention
// without a norm, HybridNorm's blocks), X enters no sublayer and leaves no trace in the
// output, so the coupled model is the Pre-Norm model on Y. The Y side stacks as in
// SiameseNormWithZeroedXStreamComputesPreNorm: where the sublayer has the fused-input norm
// LN_in, LN_Y has weight 1 and LN_in the Pre-Norm weights; where it has none (the switch off,
// or HybridNorm's attention), LN_Y takes them. Float64, eps 1e-30.
double coupled_as_pre(const std::string& x_stream, config::SiameseConfig sw, const std::string& norm,
                      bool zero_x) {
  auto c = tiny_config("pre", {16, 2, std::nullopt, 3, 6, false, norm});
  c.layer_norm_eps = 1e-30;
  c.mixln_alpha = 0.5;  // one Post-Norm layer of three
  c.use_query_norm = c.use_key_norm = c.use_value_norm = hybrid_family(x_stream);
  auto pre = build(c, 5);
  pre->to(torch::kDouble);
  {
    torch::NoGradGuard g;
    for (auto& p : pre->named_parameters())  // the QKV norms too
      if (p.key().find("_norm.") != std::string::npos)
        p.value().copy_(1.0 + 0.5 * torch::randn_like(p.value()));
  }
  c.residual = "siamese";
  sw.x_stream = siamese::testing::x_stream_named(x_stream);
  c.siamese = sw;
  auto sn = build(c, 6);
  sn->to(torch::kDouble);
  randomize_topology(sn);
  copy_shared_weights(pre, sn);
  const bool has_bias = norm != "rms";
  auto params = sn->topology().named_parameters();
  auto assign = [&](const std::string& dst, double w, const std::string& src = "") {
    for (const std::string part : {".weight", ".bias"}) {
      if (part == ".bias" && !has_bias) continue;
      auto t = param(sn, "topology." + dst + part);
      if (!src.empty())
        set_(t, param(pre, "topology." + src + part));
      else
        set_(t, part == ".weight" ? torch::full_like(t, w) : torch::zeros_like(t));
    }
  };
  const double x_weight = zero_x ? 0.0 : 1.0;
  for (auto& p : params) {
    const std::string& k = p.key();
    const bool y_side = k.find("_y_") != std::string::npos || k.find("_input_norm") != std::string::npos ||
                        k.find("ln_final_f") != std::string::npos;
    if (y_side) continue;
    if (k.size() > 3 && k.substr(k.size() - 3) == ".c1") {
      if (hybrid_family(x_stream)) set_(p.value(), torch::full_like(p.value(), x_weight));
    } else if (k.substr(k.size() - 7) == ".weight") {
      assign(k.substr(0, k.size() - 7), x_weight);
    }
  }
  for (int64_t l = 0; l < c.n_layers; ++l)
    for (const std::string f : {"attn", "ff"}) {
      const std::string b = "blocks." + std::to_string(l) + ".";
      if (params.find(b + f + "_input_norm.weight")) {
        assign(b + f + "_y_norm", 1.0);
        assign(b + f + "_input_norm", 0.0, b + f + "_norm");
      } else {
        assign(b + f + "_y_norm", 0.0, b + f + "_norm");
      }
    }
  assign("ln_y_f", 1.0);
  assign("ln_final_f", 0.0, "ln_f");
  auto ids = random_ids(c, 2, 6, 8);
  torch::NoGradGuard g;
  const auto want = pre->forward(ids);
  return ((sn->forward(ids) - want).abs().max() / want.abs().max()).item<double>();
}

TEST(Topologies, SiameseNormEveryCouplingWithZeroedXStreamComputesPreNorm) {
  for (const auto& x_stream : kXStreams) {
    // OLMo-2's block reads X raw: zeroed output norms leave X at the embeddings in every FFN
    // input (siamese.cpp), so this coupling has no Pre-Norm setting to reach.
    if (x_stream == "reordered") continue;
    for (const std::string norm : {"rms", "default"})
      for (int bits = 0; bits < 8; ++bits) {
        const config::SiameseConfig sw{(bits & 1) != 0, (bits & 2) != 0, (bits & 4) != 0};
        if (hybrid_family(x_stream) && !sw.gamma) continue;  // X enters attention unscaled
        SCOPED_TRACE(x_stream + " " + norm + " switches " + std::to_string(bits));
        const double diff = coupled_as_pre(x_stream, sw, norm, true);
        EXPECT_LT(diff, 1e-12);
        // X matters when not zeroed, except where it is Y: a Pre-Norm-kind X without depth
        // scaling takes Y's very updates, and without gamma its input term only rescales Y's.
        const bool x_is_y = (x_stream == "pre" || x_stream == "lns") && !sw.depth_scaling && !sw.gamma;
        if (!x_is_y) {
          EXPECT_GT(coupled_as_pre(x_stream, sw, norm, false), 1e-3);
        }
        if (bits == 7)
          std::cout << "[generalization] siamese x_stream=" << x_stream << " " << norm
                    << ": max |logit diff| / max |logit| = " << diff << "\n";
      }
  }
}

// Each coupling against its update written out with plain ops in float64 (F_s a fixed random
// map, every norm weight and gamma random), at every switch setting.
TEST_F(TopologyFormula, SiameseNormEveryCouplingEverySwitchSetting) {
  const double deep_alpha = std::pow(2.0 * kLayers, 0.25);
  for (const auto& p : kXStreams)
    for (int bits = 0; bits < 8; ++bits) {
      config::SiameseConfig sw{(bits & 1) != 0, (bits & 2) != 0, (bits & 4) != 0};
      sw.x_stream = siamese::testing::x_stream_named(p);
      SCOPED_TRACE(p + " switches " + std::to_string(bits));
      w_.clear();
      build("siamese", sw);
      auto x = emb_, y = emb_;
      for (int64_t s = 0; s < 2 * kLayers; ++s) {
        const int64_t l = s / 2;
        const bool attn = s % 2 == 0;
        const double c = sw.depth_scaling ? std::sqrt(2.0 * (l + 1)) : 1.0;
        const auto xn = blk(s, "attn_norm", "ff_norm");
        const bool post = p == "post" || p == "deepnorm" || (p == "mixln" && l < 2);
        const bool hybrid = p == "hybrid" || (p == "hybrid_star" && l > 0);
        torch::Tensor xin;
        if (p == "reordered") {
          xin = x;
        } else if (post) {
          x = rms(x, xn);
          xin = x;
        } else if (hybrid) {
          if (!attn) x = rms(x, xn);
          xin = x;
        } else {
          xin = rms(x, xn) / (p == "lns" ? std::sqrt(double(l + 1)) : 1.0);
        }
        auto gx = attn && sw.gamma ? xin * P("blocks." + std::to_string(l) + ".c1") : xin;
        auto h = gx + rms(y, blk(s, "attn_y_norm", "ff_y_norm"));
        if (sw.fused_input_norm && !(hybrid && attn)) h = rms(h, blk(s, "attn_input_norm", "ff_input_norm"));
        auto o = F(h, s);
        auto x_term = p == "peri"        ? rms(o, blk(s, "attn_out_norm", "ff_out_norm"))
                      : p == "reordered" ? rms(o, xn)
                                         : o;
        x = (p == "deepnorm" ? deep_alpha * x : x) + x_term / c;
        y = y + o;
      }
      expect_matches(rms(rms(x, "ln_f") + rms(y, "ln_y_f"), "ln_final_f"));
    }
}

// post_pre and hybrid_pre are the couplings with post and hybrid: same parameters under the
// same names, same outputs; the names refuse another x_stream; bad values name the key.
TEST(Topologies, SiameseNormNamedCouplingsAreXStreamValues) {
  for (const auto& [name, x_stream] :
       std::vector<std::pair<std::string, std::string>>{{"post_pre", "post"}, {"hybrid_pre", "hybrid"}}) {
    auto c = tiny_config(name, kSmall);
    auto named = build(c, 3);
    c.residual = "siamese";
    c.siamese.x_stream = siamese::testing::x_stream_named(x_stream);
    auto coupled = build(c, 3);
    std::vector<std::string> a, b;
    for (auto& p : named->named_parameters()) a.push_back(p.key());
    for (auto& p : coupled->named_parameters()) b.push_back(p.key());
    EXPECT_EQ(a, b) << name;
    auto ids = random_ids(c, 2, 6, 1);
    torch::NoGradGuard g;
    EXPECT_TRUE(torch::equal(named->forward(ids), coupled->forward(ids))) << name;
    c.residual = name;
    c.siamese.x_stream = siamese::testing::x_stream_named("deepnorm");
    try {
      build(c, 3);
      ADD_FAILURE() << name << " accepted x_stream deepnorm";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("model.siamese.x_stream"), std::string::npos) << e.what();
    }
  }
  // A placement X cannot take is refused where the config is read, with the ones it can.
  try {
    config::load_config(std::string(SIAMESE_SOURCE_DIR) + "/configs/tiny/base.yaml",
                        {"--model.residual=siamese", "--model.siamese.x_stream=hc"});
    ADD_FAILURE() << "x_stream hc accepted";
  } catch (const Error& e) {
    const std::string what = std::string(e.what()) + " " + e.where() + " " + e.fix();
    EXPECT_NE(what.find("model.siamese.x_stream"), std::string::npos) << what;
    EXPECT_NE(what.find("deepnorm"), std::string::npos) << what;
  }
  // x_stream hybrid turns HybridNorm's Q/K/V norms on, as hybrid_pre's row does.
  auto h = tiny_config("siamese", kSmall);
  h.siamese.x_stream = siamese::testing::x_stream_named("hybrid");
  apply_required_settings(h);
  EXPECT_TRUE(h.use_query_norm && h.use_key_norm && h.use_value_norm);
  // x_stream reordered turns OLMo-2's full-width Q/K norms on, as reordered's row does.
  auto r = tiny_config("siamese", kSmall);
  r.siamese.x_stream = siamese::testing::x_stream_named("reordered");
  apply_required_settings(r);
  EXPECT_TRUE(r.attention_layer_norm);
  // DeepNorm's X keeps DeepNet's init gain.
  auto d = tiny_config("siamese", kSmall);
  d.siamese.x_stream = siamese::testing::x_stream_named("deepnorm");
  auto topo = make_topology(d);
  EXPECT_EQ(topo->init_gain(Projection::Value, 0), std::pow(8.0 * d.n_layers, -0.25));
  EXPECT_EQ(topo->init_gain(Projection::Query, 0), 1.0);
}

TEST(Topologies, SiameseNormEveryCouplingFiniteDifferenceGradientsFloat64) {
  for (const auto& x_stream : kXStreams) {
    SCOPED_TRACE(x_stream);
    auto c = tiny_config("siamese", {8, 2, std::nullopt, 2, 4, false, "rms"});
    c.siamese.x_stream = siamese::testing::x_stream_named(x_stream);
    c.mixln_alpha = 0.5;
    apply_required_settings(c);
    auto m = build(c, 21);
    m->to(torch::kDouble);
    m->use_reference_attention(true);
    randomize_topology(m);
    double abs_err = 0.0;
    const double rel = gradcheck(m, random_ids(c, 2, 4, 9), &abs_err);
    std::cout << "[gradcheck] siamese x_stream=" << x_stream << ": max abs err " << abs_err
              << ", max rel err " << rel << "\n";
  }
}

}  // namespace
}  // namespace siamese::model
