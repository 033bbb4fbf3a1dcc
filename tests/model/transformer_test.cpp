// The transformer around the topology seam: attention kernel vs the explicit reference,
// GQA semantics, RoPE, causality, OLMo init rules, parameter kinds and counts (the
// SiameseNorm overhead), FLOPs, OLMo name mapping, probes and truncated depth, .npy files.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "siamese/common/error.h"
#include "siamese/common/npy.h"
#include "siamese/model/accounting.h"
#include "siamese/model/olmo_names.h"
#include "siamese/model/topology_table.h"
#include "siamese/model/transformer.h"
#include "support/process.h"
#include "support/temp_dir.h"
#include "support/tiny_configs.h"

namespace siamese::model {
namespace {

namespace fs = std::filesystem;

config::ModelConfig small(const std::string& residual = "pre") {
  config::ModelConfig c = siamese::testing::tiny_model(residual, {32, 4, 3, 50, 64, 32});
  c.mlp_ratio = 4;
  c.rope = true;
  c.layer_norm_type = config::LayerNormType::RMS;
  c.include_bias = false;
  c.weight_tying = false;
  return c;
}

Transformer build_model(const config::ModelConfig& c, uint64_t seed = 0) {
  torch::manual_seed(seed);
  Transformer m(c);
  m->eval();
  // Norm weights away from 1 so that every norm matters in the comparisons below.
  torch::NoGradGuard g;
  for (auto& p : m->named_parameters())
    if (param_kind(p.key()) == ParamKind::Norm) p.value().copy_(1.0 + 0.3 * torch::randn_like(p.value()));
  return m;
}

torch::Tensor ids(const config::ModelConfig& c, int64_t B, int64_t T, uint64_t seed = 1) {
  torch::manual_seed(seed);
  return torch::randint(c.vocab_size, {B, T}, torch::kLong);
}

double rel(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max()).item<double>();
}

TEST(Transformer, AttentionKernelMatchesReferenceWithGradients) {
  for (const std::string topo : {"pre", "hybrid_pre"})
    for (std::optional<int64_t> kv :
         {std::optional<int64_t>(), std::optional<int64_t>(2), std::optional<int64_t>(1)}) {
      SCOPED_TRACE(topo + " kv " + std::to_string(kv.value_or(4)));
      auto c = small(topo);
      c.n_kv_heads = kv;
      auto m = build_model(c);
      auto x = ids(c, 2, 11);
      auto fused = m->forward(x);
      fused.pow(2).mean().backward();
      std::map<std::string, torch::Tensor> g_fused;
      for (auto& p : m->named_parameters()) g_fused[p.key()] = p.value().grad().clone();
      m->zero_grad();
      m->use_reference_attention(true);
      auto ref = m->forward(x);
      ref.pow(2).mean().backward();
      EXPECT_LT(rel(fused, ref), 1e-5);
      for (auto& p : m->named_parameters())
        EXPECT_LT(rel(g_fused[p.key()], p.value().grad()), 1e-4) << p.key();
    }
}

TEST(Transformer, LogitsAreCausal) {
  auto c = small("hybrid_pre");
  auto m = build_model(c);
  auto x = ids(c, 1, 12);
  auto before = m->forward(x);
  x[0][7] = (x[0][7].item<int64_t>() + 1) % c.vocab_size;
  auto after = m->forward(x);
  EXPECT_EQ((before.slice(1, 0, 7) - after.slice(1, 0, 7)).abs().max().item<double>(), 0.0);
  EXPECT_GT((before.slice(1, 7) - after.slice(1, 7)).abs().max().item<double>(), 1e-4);
}

// GQA: query head j reads kv head j / (n_heads / n_kv_heads) (OLMo's repeat_interleave), so
// an MHA model whose k, v rows repeat the GQA model's computes the same function.
TEST(Transformer, GroupedQueryAttentionEqualsMhaWithRepeatedHeads) {
  auto c = small("hybrid");
  c.n_kv_heads = 2;
  auto gqa = build_model(c, 3);
  auto mc = c;
  mc.n_kv_heads.reset();
  auto mha = build_model(mc, 4);
  const int64_t d = c.d_model, hd = d / c.n_heads, kv = 2 * hd;
  torch::NoGradGuard g;
  auto gp = gqa->named_parameters();
  for (auto& p : mha->named_parameters()) {
    const auto& src = gp[p.key()];
    if (p.key().find("att_proj") == std::string::npos) {
      p.value().copy_(src);
      continue;
    }
    auto rep = [&](const torch::Tensor& rows) {  // [kv, d] -> [d, d], each head twice
      return rows.view({2, hd, d}).repeat_interleave(2, 0).reshape({d, d});
    };
    p.value().copy_(
        torch::cat({src.slice(0, 0, d), rep(src.slice(0, d, d + kv)), rep(src.slice(0, d + kv))}));
  }
  auto x = ids(c, 2, 9);
  EXPECT_LT(rel(gqa->forward(x), mha->forward(x)), 1e-5);
}

// RoPE makes q.k depend on positions only through their difference.
TEST(Transformer, RopeScoresDependOnRelativePosition) {
  Rope rope(8, 10000.0, true);
  auto q = torch::randn({1, 1, 1, 8}).expand({1, 1, 10, 8}).contiguous();
  auto k = torch::randn({1, 1, 1, 8}).expand({1, 1, 10, 8}).contiguous();
  auto [rq, rk] = rope.apply(q, k);
  auto s = torch::matmul(rq, rk.transpose(-1, -2))[0][0];
  for (int64_t i = 1; i < 10; ++i)
    for (int64_t j = 1; j <= i; ++j)
      EXPECT_NEAR(s[i][j].item<double>(), s[i - 1][j - 1].item<double>(), 1e-4);
  EXPECT_GT((s[5][0] - s[5][5]).abs().item<double>(), 1e-3);
}

// RoPE is OLMo's (GPT-NeoX) rotate-half form, t*cos(emb) + [-t2, t1]*sin(emb) with
// emb = [angles, angles], written here with the textbook ops in float64: values and
// gradients of q and k, at an offset (a KV cache's) and at per-row positions (documents).
TEST(Transformer, RopeIsTheRotateHalfFormulaWithItsGradient) {
  const int64_t hd = 8, T = 6;
  Rope rope(hd, 500.0, true);
  auto textbook = [&](const torch::Tensor& t, const torch::Tensor& pos) {  // pos [B or 1, 1, T, 1]
    // Angles and their sines in float32, as OLMo computes them.
    auto inv_freq = 1.0 / torch::pow(500.0, torch::arange(0, hd, 2, torch::kFloat) / double(hd));
    auto angles = pos.to(torch::kFloat) * inv_freq;
    auto sin = torch::cat({angles, angles}, -1).sin().to(torch::kFloat64);
    auto cos = torch::cat({angles, angles}, -1).cos().to(torch::kFloat64);
    auto halves = t.chunk(2, -1);
    return t * cos + torch::cat({-halves[1], halves[0]}, -1) * sin;
  };
  torch::manual_seed(3);
  const auto q = torch::randn({2, 3, T, hd}, torch::kFloat64),
             k = torch::randn({2, 1, T, hd}, torch::kFloat64);
  const auto gq = torch::randn_like(q), gk = torch::randn_like(k);
  const auto rows = torch::tensor({3, 4, 0, 1, 2, 3, 0, 1, 2, 0, 1, 2}, torch::kInt64).view({2, T});
  for (const bool per_row : {false, true}) {
    const auto pos = per_row ? rows.view({2, 1, T, 1}) : torch::arange(4, 4 + T).view({1, 1, T, 1});
    const auto q1 = q.clone().requires_grad_(), k1 = k.clone().requires_grad_();
    const auto q2 = q.clone().requires_grad_(), k2 = k.clone().requires_grad_();
    const auto [rq, rk] = per_row ? rope.apply(q1, k1, rows) : rope.apply(q1, k1, 4);
    const auto eq = textbook(q2, pos), ek = textbook(k2, pos);
    EXPECT_LT((rq - eq).abs().max().item<double>(), 1e-13) << per_row;
    EXPECT_LT((rk - ek).abs().max().item<double>(), 1e-13) << per_row;
    ((rq * gq).sum() + (rk * gk).sum()).backward();
    ((eq * gq).sum() + (ek * gk).sum()).backward();
    EXPECT_LT((q1.grad() - q2.grad()).abs().max().item<double>(), 1e-13) << per_row;
    EXPECT_LT((k1.grad() - k2.grad()).abs().max().item<double>(), 1e-13) << per_row;
  }
}

TEST(Transformer, OlmoInitFollowsInitFn) {
  auto c = small("pre");
  c.d_model = 256;
  c.n_heads = 4;
  c.n_layers = 2;
  c.init_fn = config::InitFn::Mitchell;
  torch::manual_seed(0);
  Transformer m(c);
  auto p = m->named_parameters();
  auto std_of = [&](const std::string& n) { return p[n].std().item<double>(); };
  const double trunc = 0.9866;  // std of a unit normal truncated at +-3 sigma (+-2: 0.8796)
  EXPECT_NEAR(std_of("blocks.0.attn.att_proj.weight"), trunc / 16.0, 2e-3);
  EXPECT_NEAR(std_of("blocks.1.attn.attn_out.weight"), trunc / std::sqrt(2.0 * 256 * 2), 2e-3);
  EXPECT_NEAR(std_of("blocks.1.mlp.ff_out.weight"), trunc / std::sqrt(2.0 * 512 * 2), 2e-3);
  EXPECT_LE(p["blocks.0.attn.att_proj.weight"].abs().max().item<double>(), 3.0 / 16.0 + 1e-6);

  c.init_fn = config::InitFn::Normal;
  c.init_std = 0.02;
  c.init_cutoff_factor = 2.0;
  c.emb_init_std = 0.5;
  torch::manual_seed(0);
  Transformer n(c);
  auto q = n->named_parameters();
  EXPECT_NEAR(q["blocks.0.mlp.ff_proj.weight"].std().item<double>(), 0.02 * 0.8796, 4e-4);
  EXPECT_LE(q["blocks.0.mlp.ff_proj.weight"].abs().max().item<double>(), 0.04 + 1e-7);
  EXPECT_NEAR(q["wte.weight"].std().item<double>(), 0.5 * 0.8796, 1e-2);
  EXPECT_EQ(q["topology.ln_f.weight"].min().item<double>(), 1.0);

  c.init_fn = config::InitFn::FullMegatron;
  c.init_cutoff_factor.reset();
  c.emb_init_std.reset();
  torch::manual_seed(0);
  Transformer f(c);
  auto r = f->named_parameters();
  EXPECT_NEAR(r["blocks.0.attn.attn_out.weight"].std().item<double>(), trunc * 0.02 / 2.0, 3e-4);
  EXPECT_NEAR(r["ff_out.weight"].std().item<double>(), trunc / 16.0, 2e-3);
}

TEST(Transformer, ParameterKindsFollowOlmoDecayGroups) {
  auto c = small("hybrid_pre");
  c.include_bias = true;
  c.layer_norm_type = config::LayerNormType::Default;
  Transformer m(c);
  std::map<ParamKind, int> seen;
  for (auto& p : m->named_parameters()) ++seen[param_kind(p.key())];
  EXPECT_EQ(param_kind("wte.weight"), ParamKind::Embedding);
  EXPECT_EQ(param_kind("blocks.2.attn.att_proj.weight"), ParamKind::Linear);
  EXPECT_EQ(param_kind("blocks.2.mlp.ff_out.weight"), ParamKind::Linear);
  EXPECT_EQ(param_kind("ff_out.weight"), ParamKind::Linear);
  EXPECT_EQ(param_kind("blocks.2.attn.att_proj.bias"), ParamKind::Bias);
  EXPECT_EQ(param_kind("blocks.0.attn.q_norm.weight"), ParamKind::Norm);
  EXPECT_EQ(param_kind("topology.blocks.1.c1"), ParamKind::Norm);
  EXPECT_EQ(param_kind("topology.ln_final_f.weight"), ParamKind::Norm);
  EXPECT_EQ(seen[ParamKind::Linear], 4 * 3 + 1);
  EXPECT_EQ(seen[ParamKind::Embedding], 1);
}

// Every parameter of every topology parses, and taking a name apart and putting it back
// gives the name.
TEST(Transformer, EveryParameterNameParsesIntoOwnerLayerAndLocalName) {
  using Owner = ParamName::Owner;
  for (const auto& topology : topology_names()) {
    auto c = small(topology);
    c.rope = false;
    c.embedding_layer_norm = true;
    apply_required_settings(c);
    Transformer m(c);
    for (const auto& kv : m->named_parameters()) {
      SCOPED_TRACE(topology + " " + kv.key());
      const ParamName p = parse_param_name(kv.key());
      std::string back;
      switch (p.owner) {
        case Owner::Embedding:
        case Owner::Head:
          back = p.local;
          break;
        case Owner::Attention:
          back = fmt::format("blocks.{}.attn.{}", *p.layer, p.local);
          break;
        case Owner::Mlp:
          back = fmt::format("blocks.{}.mlp.{}", *p.layer, p.local);
          break;
        case Owner::Topology:
          back = "topology." + (p.layer ? fmt::format("blocks.{}.", *p.layer) : std::string()) + p.local;
          break;
      }
      EXPECT_EQ(back, kv.key());
      EXPECT_TRUE(!p.layer || (*p.layer >= 0 && *p.layer < c.n_layers));
    }
  }
  for (const char* bad : {"blocks.x.attn.w", "blocks.1", "topology.", "topology.blocks.2", "head.weight", ""})
    EXPECT_THROW(parse_param_name(bad), Error) << bad;
  EXPECT_EQ(parse_param_name("topology.blocks.12.attn_y_norm.weight").layer, 12);
}

int64_t numel_where(Transformer& m, const std::function<bool(const std::string&)>& pred) {
  int64_t n = 0;
  for (auto& p : m->named_parameters())
    if (pred(p.key())) n += p.value().numel();
  return n;
}

TEST(Transformer, ParameterCountsMatchTheModelAndSiameseOverheadIsItsNorms) {
  for (const std::string norm : {"rms", "default"}) {
    auto c = small("hybrid_pre");
    c.layer_norm_type = *config::enum_named<config::LayerNormType>(norm);
    c.include_bias = norm == "default";
    auto pre_cfg = c;
    pre_cfg.residual = "pre";
    Transformer m(c), pre(pre_cfg);
    const auto counts = count_parameters(c), pre_counts = count_parameters(pre_cfg);
    EXPECT_EQ(counts.total(), numel_where(m, [](auto&) { return true; }));
    EXPECT_EQ(counts.residual, numel_where(m, [](auto& n) { return n.rfind("topology.", 0) == 0; }));
    EXPECT_EQ(counts.attention, pre_counts.attention);
    EXPECT_EQ(counts.mlp, pre_counts.mlp);
    EXPECT_EQ(counts.embedding + counts.head, pre_counts.embedding + pre_counts.head);
    // Per layer SiameseNorm adds c1 and three norms (attn_y, ff_y, ff_input) and drops
    // attn_norm; the head adds ln_y_f and ln_final_f. A norm has d weights (+ d biases).
    const int64_t d = c.d_model, L = c.n_layers, norm_size = norm == "rms" ? d : 2 * d;
    EXPECT_EQ(counts.total() - pre_counts.total(), L * (d + 2 * norm_size) + 2 * norm_size);
  }
}

// count_parameters works from shapes; every topology, attention layout and norm choice must
// land on the numbers the built model has, part by part.
TEST(Transformer, ParameterCountsFromShapesMatchTheBuiltModelForEveryTopology) {
  struct Setting {
    std::string name;
    std::function<void(config::ModelConfig&)> set;
  };
  const std::vector<Setting> variants = {
      {"rms, rope, untied", [](config::ModelConfig&) {}},
      {"layer norm with biases, learned positions, tied, emb norm",
       [](config::ModelConfig& c) {
         c.layer_norm_type = config::LayerNormType::Default;
         c.include_bias = true;
         c.rope = false;
         c.weight_tying = true;
         c.embedding_layer_norm = true;
       }},
      {"GQA, gelu, no affine",
       [](config::ModelConfig& c) {
         c.n_kv_heads = 2;
         c.activation_type = config::Activation::GELU;
         c.layer_norm_with_affine = false;
       }},
      {"MQA, full-width QK norms, bias only in norms",
       [](config::ModelConfig& c) {
         c.multi_query_attention = true;
         c.n_kv_heads = 1;
         c.attention_layer_norm = true;
         c.bias_for_layer_norm = true;
         c.layer_norm_type = config::LayerNormType::Default;
       }},
      {"explicit hidden size, 3 hyper-connection streams",
       [](config::ModelConfig& c) {
         c.mlp_hidden_size = 70;
         c.hc_rate = 3;
       }},
  };
  for (const auto& name : topology_names())
    for (const auto& v : variants) {
      SCOPED_TRACE(name + ": " + v.name);
      auto c = small(name);
      v.set(c);
      apply_required_settings(c);
      if (c.attention_layer_norm && c.use_query_norm) continue;                 // HybridNorm's own Q/K norms
      if (name == "ngpt" && c.activation_type != config::Activation::SwiGLU) {  // nGPT scales SwiGLU's halves
        EXPECT_THROW(Transformer{c}, Error);
        continue;
      }
      Transformer m(c);
      const auto counts = count_parameters(c);
      EXPECT_EQ(counts.total(), numel_where(m, [](auto&) { return true; }));
      EXPECT_EQ(counts.attention,
                numel_where(m, [](auto& n) { return n.find(".attn.") != std::string::npos; }));
      EXPECT_EQ(counts.mlp, numel_where(m, [](auto& n) { return n.find(".mlp.") != std::string::npos; }));
      EXPECT_EQ(counts.residual, numel_where(m, [](auto& n) { return n.rfind("topology.", 0) == 0; }));
      EXPECT_EQ(counts.head, numel_where(m, [](auto& n) { return n.rfind("ff_out.", 0) == 0; }));
    }
}

// A resumed run restores the global generator and then logs the parameter count; counting
// must not draw, or the first resumed dropout masks differ from the uninterrupted run's.
TEST(Transformer, CountingParametersLeavesTheGlobalGeneratorAlone) {
  torch::manual_seed(11);
  const auto expected = torch::rand({8});
  for (const char* topology : {"hybrid_pre", "mhc"}) {  // mhc's topology draws its init
    torch::manual_seed(11);
    count_parameters(small(topology));
    EXPECT_TRUE(torch::rand({8}).equal(expected)) << topology;
  }
}

TEST(Transformer, FlopsPerTokenIsSixNPlusAttention) {
  for (bool tied : {false, true}) {
    auto c = small("pre");
    c.weight_tying = tied;
    c.n_kv_heads = 2;
    Transformer m(c);
    int64_t n = numel_where(m, [](auto& k) { return param_kind(k) == ParamKind::Linear; });
    if (tied) n += c.embedding_size * c.d_model;
    const int64_t T = 24;
    EXPECT_DOUBLE_EQ(flops_per_token(c, T), 6.0 * n + 12.0 * c.n_layers * c.d_model * T);
  }
}

TEST(Transformer, HeadHonorsTyingPaddingAndScaling) {
  auto c = small("pre");
  c.weight_tying = true;
  c.scale_logits = true;
  auto m = build_model(c);
  EXPECT_FALSE(m->named_parameters().contains("ff_out.weight"));
  auto x = ids(c, 2, 5);
  auto logits = m->forward(x);
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{2, 5, c.embedding_size}));
  auto expect = torch::matmul(m->hidden(x), m->wte->weight.t()) / std::sqrt(double(c.d_model));
  EXPECT_LT(rel(logits, expect), 1e-6);
}

TEST(Transformer, ProbeSeesEveryStreamAndTruncationStopsEarly) {
  auto c = small("hybrid_pre");
  auto m = build_model(c);
  auto x = ids(c, 2, 6);
  std::map<std::pair<int64_t, std::string>, torch::Tensor> seen;
  const Probe probe = [&](int64_t l, const std::string& s, const torch::Tensor& t) {
    seen[{l, s}] = t.clone();
  };
  ForwardOptions full;
  full.probe = &probe;
  auto logits = m->forward(x, full);
  EXPECT_LT(rel(logits, m->forward(x)), 1e-7);
  for (int64_t l = -1; l < c.n_layers; ++l) {
    EXPECT_TRUE(seen.count({l, "x"})) << l;
    EXPECT_TRUE(seen.count({l, "y"})) << l;
  }
  EXPECT_TRUE((seen.count({c.n_layers, "final"})));
  EXPECT_TRUE((seen[{-1, "x"}].equal(m->wte->weight.index({x}))));

  auto full_streams = seen;
  seen.clear();
  ForwardOptions cut;
  cut.probe = &probe;
  cut.n_blocks = 1;
  m->forward(x, cut);
  EXPECT_TRUE((seen[{0, "y"}].equal(full_streams[{0, "y"}])));
  EXPECT_FALSE((seen.count({1, "y"})));
  EXPECT_TRUE((seen.count({1, "final"})));
}

TEST(Transformer, DropoutOnlyInTraining) {
  auto c = small("pre");
  c.attention_dropout = c.residual_dropout = c.embedding_dropout = 0.1;
  auto m = build_model(c);
  auto x = ids(c, 2, 8);
  EXPECT_TRUE(m->forward(x).equal(m->forward(x)));
  m->train();
  EXPECT_FALSE(m->forward(x).equal(m->forward(x)));
}

TEST(Transformer, OlmoAttentionLayerNormIsFullWidth) {
  auto c = small("pre");
  c.attention_layer_norm = true;
  c.n_kv_heads = 2;
  auto m = build_model(c);
  auto p = m->named_parameters();
  EXPECT_EQ(p["blocks.0.attn.q_norm.weight"].size(0), c.d_model);
  EXPECT_EQ(p["blocks.0.attn.k_norm.weight"].size(0), 2 * c.d_model / c.n_heads);
  auto x = ids(c, 1, 5);
  auto before = m->forward(x);
  {
    torch::NoGradGuard g;
    p["blocks.0.attn.k_norm.weight"].mul_(2.0);
  }
  EXPECT_GT(rel(m->forward(x), before), 1e-4);
}

TEST(Transformer, ConfigErrorsNameKeyAndFix) {
  auto expect_error = [](config::ModelConfig c, const std::string& needle) {
    try {
      check_model_config(c);
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto c = small("nonsense");
  expect_error(c, "hybrid_pre");  // the message lists the valid names
  c = small("hybrid");
  c.use_value_norm = false;
  expect_error(c, "is defined with model.use_value_norm on");
  c = small("pre");
  c.attention_layer_norm = c.use_query_norm = true;
  expect_error(c, "attention_layer_norm");
  c = small("pre");
  c.n_kv_heads = 3;
  expect_error(c, "n_kv_heads");
  c = small("pre");
  c.embedding_size = 10;
  expect_error(c, "embedding_size");
}

TEST(OlmoNames, RoundTripAndLoadChecks) {
  EXPECT_EQ(from_olmo_key("transformer.blocks.3.att_proj.weight"), "blocks.3.attn.att_proj.weight");
  EXPECT_EQ(from_olmo_key("transformer.blocks.0.ff_out.weight"), "blocks.0.mlp.ff_out.weight");
  EXPECT_EQ(from_olmo_key("transformer.ff_out.weight"), "ff_out.weight");
  EXPECT_EQ(from_olmo_key("model.transformer.blocks.1.c1"), "topology.blocks.1.c1");
  EXPECT_EQ(to_olmo_key("topology.ln_y_f.weight"), "transformer.ln_y_f.weight");
  EXPECT_THROW(from_olmo_key("lm_head.weight"), Error);

  auto c = small("hybrid_pre");
  auto a = build_model(c, 1), b = build_model(c, 2);
  for (auto& p : a->named_parameters()) EXPECT_EQ(from_olmo_key(to_olmo_key(p.key())), p.key());
  load_olmo_state(*b, olmo_state(*a), "test");
  auto x = ids(c, 1, 4);
  EXPECT_TRUE(a->forward(x).equal(b->forward(x)));

  auto state = olmo_state(*a);
  state.pop_back();
  state[0].second = torch::zeros({3});
  try {
    load_olmo_state(*b, state, "ckpt.safetensors");
    FAIL();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("missing"), std::string::npos) << msg;
    EXPECT_NE(msg.find("shape"), std::string::npos) << msg;
    EXPECT_NE(msg.find("ckpt.safetensors"), std::string::npos) << msg;
  }
}

// configs/tiny/hybrid.yaml: d_model 256, 6 layers, RMSNorm; hybrid_pre adds per layer c1 and
// three norms and drops attn_norm (6 * 3 * 256), plus ln_y_f and ln_final_f (2 * 256).
TEST(Inspect, CommandPrintsComponentsOverheadAndFlops) {
  const auto scratch = siamese::testing::fresh_dir("inspect_test", "hybrid");
  fs::create_directories(scratch);
  const auto r =
      siamese::testing::run_siamese("inspect configs/tiny/hybrid.yaml --model.residual=hybrid_pre", scratch);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* needle :
       {"residual-path norms", "overhead vs pre: +5120 parameters", "FLOPs per token", "total"})
    EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
}

// The key/value heads inspect prints are the ones attention builds (kv_head_count): OLMo's
// multi_query_attention means one, whatever n_kv_heads says.
TEST(Inspect, KeyValueHeadsAreTheModelsOwn) {
  const auto scratch = siamese::testing::fresh_dir("inspect_test", "mqa");
  fs::create_directories(scratch);
  const auto r = siamese::testing::run_siamese(
      "inspect configs/tiny/base.yaml --model.multi_query_attention=true", scratch);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.output.find("n_kv_heads 1 "), std::string::npos) << r.output;
}

// A memory plan for a launch train refuses (16 sequences do not split over 3 ranks) is
// refused the same way, instead of printed.
TEST(Inspect, WorldSizesTrainRefusesAreRefused) {
  const auto scratch = siamese::testing::fresh_dir("inspect_test", "world");
  fs::create_directories(scratch);
  const auto refused =
      siamese::testing::run_siamese("inspect configs/tiny/base.yaml --world-size 3", scratch);
  EXPECT_EQ(refused.exit_code, 2) << refused.output << refused.err;
  EXPECT_NE(refused.err.find("global_train_batch_size 16 does not split over world size 3"),
            std::string::npos)
      << refused.err;
  const auto planned =
      siamese::testing::run_siamese("inspect configs/tiny/base.yaml --world-size 2", scratch);
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  EXPECT_NE(planned.output.find("per-rank memory"), std::string::npos) << planned.output;
  // HYBRID_SHARD over 4 ranks in nodes of 3: train refuses it (no whole number of replicas),
  // so its row says why instead of printing bytes, and a config that asks for it is refused.
  const auto uneven = siamese::testing::run_siamese(
      "inspect configs/tiny/base.yaml --world-size 4 --local-world-size 3", scratch);
  ASSERT_EQ(uneven.exit_code, 0) << uneven.err;
  EXPECT_NE(uneven.output.find("HYBRID_SHARD    refused by train: "), std::string::npos) << uneven.output;
  EXPECT_NE(uneven.output.find("FULL_SHARD "), std::string::npos) << uneven.output;
  const auto hybrid = siamese::testing::run_siamese(
      "inspect configs/tiny/base.yaml --world-size 4 --local-world-size 3 --distributed_strategy=fsdp "
      "--fsdp.sharding_strategy=HYBRID_SHARD",
      scratch);
  EXPECT_EQ(hybrid.exit_code, 2) << hybrid.output << hybrid.err;
  EXPECT_NE(hybrid.err.find("fsdp.hybrid_sharding_num_model_replicas"), std::string::npos) << hybrid.err;
  // A node size without a world size prints no plan: refused as bad input, not dropped.
  const auto node_only =
      siamese::testing::run_siamese("inspect configs/tiny/base.yaml --local-world-size 4", scratch);
  EXPECT_EQ(node_only.exit_code, 2) << node_only.output << node_only.err;
  EXPECT_NE((node_only.output + node_only.err).find("--local-world-size requires --world-size"),
            std::string::npos)
      << node_only.output << node_only.err;
}

// A topology's own setting under a topology that does not read it is named (it changes
// nothing); a conflict with a setting the topology turns on names the side that can change.
TEST(Inspect, TopologySettingsTheTopologyIgnoresOrNeedsAreNamed) {
  const auto scratch = siamese::testing::fresh_dir("inspect_test", "topology_settings");
  fs::create_directories(scratch);
  const auto unread = siamese::testing::run_siamese(
      "inspect configs/tiny/base.yaml --model.siamese.x_stream=reordered --model.hc_rate=3", scratch);
  ASSERT_EQ(unread.exit_code, 0) << unread.err;
  for (const char* needle :
       {"model.siamese.x_stream is set, but topology pre does not read it (only "
        "hybrid_pre, post_pre, siamese do)",
        "model.hc_rate is set, but topology pre does not read it (only hc, mhc, mhc_lite do)"})
    EXPECT_NE(unread.err.find(needle), std::string::npos) << unread.err;
  const auto read = siamese::testing::run_siamese(
      "inspect configs/tiny/base.yaml --model.residual=siamese --model.siamese.x_stream=mixln "
      "--model.mixln_alpha=0.5",
      scratch);
  ASSERT_EQ(read.exit_code, 0) << read.err;
  EXPECT_EQ(read.err.find("does not read it"), std::string::npos) << read.err;
  const auto conflict = siamese::testing::run_siamese(
      "inspect configs/tiny/base.yaml --model.residual=siamese --model.siamese.x_stream=reordered "
      "--model.use_query_norm=true",
      scratch);
  EXPECT_EQ(conflict.exit_code, 2) << conflict.err;
  EXPECT_NE(
      conflict.err.find("topology siamese (with its reordered placement) needs model.attention_layer_norm "
                        "on: set the other setting named here off"),
      std::string::npos)
      << conflict.err;
}

}  // namespace
}  // namespace siamese::model
