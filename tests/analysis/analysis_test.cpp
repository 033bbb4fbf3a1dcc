// Analyses read through the probe hook and OLMo names: values against direct computations.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "siamese/analysis/depth_mixing.h"
#include "siamese/analysis/effective_depth.h"
#include "siamese/analysis/grad_norms.h"
#include "siamese/analysis/logit_lens.h"
#include "siamese/analysis/magnitude.h"
#include "siamese/analysis/stream_mixing.h"
#include "siamese/common/json_line.h"
#include "support/tiny_configs.h"

using namespace siamese;
using namespace siamese::analysis;

namespace {

model::Transformer tiny(const std::string& residual, int64_t layers = 4) {
  torch::manual_seed(7);
  config::ModelConfig cfg = siamese::testing::tiny_model(residual, {32, 2, layers, 60, 64, 16});
  cfg.rope = true;
  cfg.layer_norm_type = config::LayerNormType::RMS;
  cfg.include_bias = false;
  model::Transformer m(cfg);
  m->eval();
  return m;
}

std::vector<torch::Tensor> batches() {
  torch::manual_seed(11);
  return {torch::randint(0, 60, {2, 16}, torch::kInt64), torch::randint(0, 60, {3, 16}, torch::kInt64)};
}

torch::Tensor param(model::TransformerImpl& m, const std::string& name) { return m.named_parameters()[name]; }

}  // namespace

TEST(Magnitude, EveryStreamEveryLayer) {
  auto m = tiny("post_pre");
  auto b = batches();
  auto mag = stream_magnitudes(*m, b);
  ASSERT_EQ(mag.by_stream.size(), 2u);
  ASSERT_EQ(mag.by_stream.at("x").size(), 5u);
  // Entry 0 is the embedding: both streams start from it.
  double emb = 0;
  for (const auto& ids : b) emb += m->wte(ids).pow(2).sum(-1).sqrt().mean().item<double>() / b.size();
  EXPECT_NEAR(mag.by_stream.at("x")[0], emb, 1e-5);
  EXPECT_NEAR(mag.by_stream.at("y")[0], emb, 1e-5);
  // The Pre-Norm stream Y grows with depth; the final state is RMS-normalized (norm sqrt(d)).
  EXPECT_GT(mag.by_stream.at("y")[4], mag.by_stream.at("y")[0]);
  EXPECT_NEAR(mag.final_norm, std::sqrt(32.0), 0.05);
  EXPECT_EQ(stream_magnitudes(*tiny("pre"), b).by_stream.size(), 1u);
}

// nGPT's state lives on the unit sphere: the probes see norm 1 after the embedding (unit rows),
// after every block and at the head's input; its logit lens agrees with itself.
TEST(Magnitude, NgptStateStaysOnTheUnitSphere) {
  auto m = tiny("ngpt");
  auto b = batches();
  auto mag = stream_magnitudes(*m, b);
  ASSERT_EQ(mag.by_stream.size(), 1u);
  ASSERT_EQ(mag.by_stream.at("x").size(), 5u);
  for (double norm : mag.by_stream.at("x")) EXPECT_NEAR(norm, 1.0, 1e-6);
  EXPECT_NEAR(mag.final_norm, 1.0, 1e-6);
  EXPECT_DOUBLE_EQ(logit_lens(*m, b).agreement.at("x"), 1.0);
}

TEST(LogitLens, SingleStreamAgreesWithItself) {
  auto m = tiny("pre");
  auto lens = logit_lens(*m, batches());
  EXPECT_EQ(lens.positions, 5 * 16);
  EXPECT_DOUBLE_EQ(lens.agreement.at("x"), 1.0);
  EXPECT_EQ(lens.disagreeing, 0);
}

TEST(LogitLens, ZeroedXOutputLeavesTheYStreamsPrediction) {
  auto m = tiny("post_pre");
  {
    torch::NoGradGuard g;
    param(*m, "topology.ln_f.weight").zero_();
  }
  auto lens = logit_lens(*m, batches());
  EXPECT_DOUBLE_EQ(lens.agreement.at("y"), 1.0);
  EXPECT_LT(lens.agreement.at("x"), 1.0);  // X's own projection is now a constant
  EXPECT_GT(lens.disagreeing, 0);
  EXPECT_DOUBLE_EQ(lens.agreement_where_disagree.at("y"), 1.0);
  EXPECT_DOUBLE_EQ(lens.agreement_where_disagree.at("x"), 0.0);
}

TEST(EffectiveDepth, FullDepthIsTheModelsLoss) {
  auto m = tiny("hybrid_pre", 6);
  auto b = batches();
  auto curve = effective_depth(*m, b);
  ASSERT_EQ(curve.size(), 4u);  // k = 0..3
  double sum = 0;
  int64_t n = 0;
  {
    torch::NoGradGuard g;
    for (const auto& ids : b) {
      auto logits = m->forward(ids).slice(1, 0, -1).reshape({-1, 64});
      sum += torch::nn::functional::cross_entropy(
                 logits, ids.slice(1, 1).reshape({-1}),
                 torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                 .item<double>();
      n += ids.size(0) * (ids.size(1) - 1);
    }
  }
  EXPECT_NEAR(curve[0].loss, sum / n, 1e-5);
  EXPECT_NEAR(curve[0].perplexity, std::exp(sum / n), 1e-3);
  EXPECT_NE(curve[3].loss, curve[0].loss);
}

TEST(StreamMixing, ReadsNormScalesByOlmoName) {
  auto m = tiny("post_pre");
  {
    torch::NoGradGuard g;
    param(*m, "topology.ln_f.weight").fill_(2.0);
    param(*m, "topology.ln_y_f.weight").fill_(-0.5);
    param(*m, "topology.blocks.1.attn_norm.weight").fill_(3.0);
    param(*m, "topology.blocks.1.c1").fill_(0.5);
    param(*m, "topology.blocks.1.attn_y_norm.weight").fill_(0.25);
  }
  auto mix = stream_mixing(*m);
  ASSERT_EQ(mix.sites.size(), 8u);
  EXPECT_EQ(mix.sites[2].layer, 1);
  EXPECT_EQ(mix.sites[2].site, "attn");
  EXPECT_DOUBLE_EQ(mix.sites[2].x_scale, 1.5);
  EXPECT_DOUBLE_EQ(mix.sites[2].y_scale, 0.25);
  EXPECT_DOUBLE_EQ(mix.sites[3].x_scale, 1.0);
  EXPECT_DOUBLE_EQ(*mix.final_x, 2.0);
  EXPECT_DOUBLE_EQ(*mix.final_y, 0.5);

  auto single = stream_mixing(*tiny("pre"));
  EXPECT_TRUE(single.sites.empty());
  EXPECT_FALSE(single.final_x.has_value());
}

TEST(GradNorms, PerBlockNormOfAllItsParameters) {
  auto m = tiny("hybrid_pre");
  m->train();
  auto ids = batches()[0];
  auto logits = m->forward(ids);
  torch::nn::functional::cross_entropy(logits.slice(1, 0, -1).reshape({-1, 64}),
                                       ids.slice(1, 1).reshape({-1}))
      .backward();
  auto norms = per_layer_grad_norms(*m);
  ASSERT_EQ(norms.size(), 4u);
  double sq = 0;
  int64_t counted = 0;
  for (const auto& kv : m->named_parameters()) {
    const auto& k = kv.key();
    if (k.rfind("blocks.2.", 0) == 0 || k.rfind("topology.blocks.2.", 0) == 0) {
      sq += kv.value().grad().pow(2).sum().item<double>();
      ++counted;
    }
  }
  EXPECT_GT(counted, 5);
  EXPECT_NEAR(norms[2], std::sqrt(sq), 1e-6 * std::sqrt(sq));
  EXPECT_EQ(json_line(layer_grad_norms_row(5, {1.5, NAN})),
            "{\"step\": 5, \"layer_grad_norms\": [1.5, null]}");
}

namespace {

// A 3-layer model of `residual` whose mixing parameters are random, so that its weights
// differ per sublayer and per token.
model::Transformer mixing_model(const std::string& residual, int64_t attnres_block_size = 0) {
  torch::manual_seed(7);
  config::ModelConfig cfg = siamese::testing::tiny_model(residual, {32, 2, 3, 60, 64, 16});
  cfg.layer_norm_type = config::LayerNormType::RMS;
  cfg.include_bias = false;
  cfg.attnres_block_size = attnres_block_size;
  model::Transformer m(cfg);
  m->eval();
  torch::NoGradGuard g;
  for (auto& p : m->topology().named_parameters())
    if (p.key().find("res_query") != std::string::npos || p.key().find("mhc_fn") != std::string::npos)
      p.value().normal_(0.0, p.key().find("fn") != std::string::npos ? 0.05 : 0.5);
  return m;
}

// The token mean [..] of weights [B, T, ..], float64.
torch::Tensor token_sum(const torch::Tensor& w) { return w.to(torch::kFloat64).flatten(0, 1).sum(0); }

}  // namespace

// AttnRes's recorded weights are softmax_i(w_s . RMSNorm(v_i)) recomputed from its queries and
// the sources (the embeddings and the sublayer outputs, summed per block of 2), and
// depth_mixing reports their token means.
TEST(DepthMixing, AttnResWeightsAreTheSoftmaxOfItsQueriesOverTheSources) {
  auto m = mixing_model("attnres", 2);
  const double eps = m->config().layer_norm_eps;
  std::map<std::string, torch::Tensor> want;  // "layer/site.name" -> summed weights
  int64_t tokens = 0;
  for (const auto& ids : batches()) {
    std::vector<torch::Tensor> done, outputs, recorded;
    model::Probe streams = [&](int64_t layer, const std::string& name, const torch::Tensor& t) {
      if (layer == -1) done.push_back(t.to(torch::kFloat64));
    };
    model::Probe sublayers = [&](int64_t, const std::string& name, const torch::Tensor& t) {
      if (name == "attn_out" || name == "ffn_out") outputs.push_back(t.to(torch::kFloat64));
    };
    model::Probe mixing = [&](int64_t, const std::string&, const torch::Tensor& t) { recorded.push_back(t); };
    model::ForwardOptions opts;
    opts.probe = &streams;
    opts.sublayer_probe = &sublayers;
    opts.mixing_probe = &mixing;
    torch::NoGradGuard g;
    m->hidden(ids, opts);
    ASSERT_EQ(recorded.size(), 7u);  // 6 sublayers and the head
    torch::Tensor partial;
    for (int64_t s = 0; s <= 6; ++s) {
      auto sources = done;
      if (partial.defined()) sources.push_back(partial);
      const std::string query = s == 6 ? "topology.res_query_f"
                                       : "topology.blocks." + std::to_string(s / 2) +
                                             (s % 2 == 0 ? ".attn_res_query" : ".ff_res_query");
      std::vector<torch::Tensor> logits;
      for (const auto& v : sources)
        logits.push_back(s == 0 ? torch::zeros_like(v.select(-1, 0))
                                : (v * param(*m, query).to(torch::kFloat64)).sum(-1) /
                                      (v.pow(2).mean(-1) + eps).sqrt());
      const auto a = torch::softmax(torch::stack(logits, -1), -1);
      SCOPED_TRACE("sublayer " + std::to_string(s));
      ASSERT_EQ(recorded[s].sizes(), a.sizes());
      EXPECT_LT((recorded[s].to(torch::kFloat64) - a).abs().max().item<double>(), 1e-6);
      const std::string key =
          s == 6 ? "3/final.attnres" : std::to_string(s / 2) + (s % 2 == 0 ? "/attn" : "/ffn") + ".attnres";
      want[key] = want.count(key) ? want[key] + token_sum(a) : token_sum(a);
      if (s == 6) break;
      partial = partial.defined() ? partial + outputs[s] : outputs[s];
      if (s % 2 == 1) {
        done.push_back(partial);
        partial = torch::Tensor();
      }
    }
    tokens += ids.numel();
  }
  const auto got = depth_mixing(*m, batches());
  ASSERT_EQ(got.size(), 7u);
  for (const auto& e : got) {
    const std::string key = std::to_string(e.layer) + "/" + e.site + "." + e.name;
    SCOPED_TRACE(key);
    ASSERT_TRUE(want.count(key));
    EXPECT_LT((e.mean - want[key] / double(tokens)).abs().max().item<double>(), 1e-6);
    EXPECT_NEAR(e.mean.sum().item<double>(), 1.0, 1e-6);  // float32 weights
  }
  // Sources per sublayer: v0; v0 + partial; then one more completed block every two sublayers.
  const std::vector<int64_t> n_sources = {1, 2, 2, 3, 3, 4, 4};
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].mean.size(0), n_sources[i]);
}

// mHC's recorded pre and post weights at each attention sublayer and the head's pre weights,
// recomputed from its projections and the streams the probe sees entering the block; every
// recorded comb matrix is doubly stochastic. depth_mixing reports their token means.
TEST(DepthMixing, MhcPrePostAndCombMatchTheirParameters) {
  for (const char* residual : {"mhc", "mhc_lite"}) {
    SCOPED_TRACE(residual);
    auto m = mixing_model(residual);
    const auto& c = m->config();
    const int64_t n = c.hc_rate;
    std::map<int64_t, std::vector<torch::Tensor>> streams;  // layer -> h0..h{n-1}
    std::map<std::string, torch::Tensor> recorded;
    model::Probe on_streams = [&](int64_t layer, const std::string&, const torch::Tensor& t) {
      streams[layer].push_back(t.to(torch::kFloat64));
    };
    model::Probe on_mixing = [&](int64_t layer, const std::string& name, const torch::Tensor& t) {
      recorded[std::to_string(layer) + "/" + name] = t.to(torch::kFloat64);
    };
    model::ForwardOptions opts;
    opts.probe = &on_streams;
    opts.mixing_probe = &on_mixing;
    const auto ids = batches()[0];
    {
      torch::NoGradGuard g;
      m->hidden(ids, opts);
    }
    ASSERT_EQ(recorded.size(), 3u * 6u + 1u);
    auto logits = [&](const std::vector<torch::Tensor>& h, const std::string& fn) {
      auto x = torch::cat(h, -1);
      return (x / (x.pow(2).mean(-1, true) + c.layer_norm_eps).sqrt())
          .matmul(param(*m, fn).to(torch::kFloat64).t());
    };
    for (int64_t l = 0; l < 3; ++l) {
      SCOPED_TRACE("layer " + std::to_string(l));
      const std::string p = "topology.blocks." + std::to_string(l) + ".attn_mhc_";
      auto z = logits(streams[l - 1], p + "fn");
      auto b = param(*m, p + "base").to(torch::kFloat64), a = param(*m, p + "scale").to(torch::kFloat64);
      auto pre = torch::sigmoid(z.narrow(-1, 0, n) * a[0] + b.narrow(0, 0, n)) + c.mhc_eps;
      auto post = c.mhc_post_scale * torch::sigmoid(z.narrow(-1, n, n) * a[1] + b.narrow(0, n, n));
      const std::string at = std::to_string(l) + "/attn.";
      EXPECT_LT((recorded[at + "pre"] - pre).abs().max().item<double>(), 1e-5);
      EXPECT_LT((recorded[at + "post"] - post).abs().max().item<double>(), 1e-5);
      for (const char* site : {"/attn.comb", "/ffn.comb"}) {
        const auto& comb = recorded[std::to_string(l) + site];
        ASSERT_EQ(comb.sizes().vec(), (std::vector<int64_t>{2, 16, n, n}));
        EXPECT_GE(comb.min().item<double>(), 0.0);
        EXPECT_LT((comb.sum(-1) - 1).abs().max().item<double>(), 1e-4);
        EXPECT_LT((comb.sum(-2) - 1).abs().max().item<double>(), 1e-4);
      }
    }
    auto z = logits(streams[2], "topology.mhc_head_fn");
    auto head = torch::sigmoid(z * param(*m, "topology.mhc_head_scale").to(torch::kFloat64) +
                               param(*m, "topology.mhc_head_base").to(torch::kFloat64)) +
                c.mhc_eps;
    EXPECT_LT((recorded["3/final.pre"] - head).abs().max().item<double>(), 1e-5);

    const auto got = depth_mixing(*m, {ids});
    ASSERT_EQ(got.size(), recorded.size());
    for (const auto& e : got) {
      const std::string key = std::to_string(e.layer) + "/" + e.site + "." + e.name;
      SCOPED_TRACE(key);
      EXPECT_LT((e.mean - token_sum(recorded.at(key)) / double(ids.numel())).abs().max().item<double>(),
                1e-9);
    }
  }
}

// Topologies with fixed mixing report none.
TEST(DepthMixing, PreNormHasNoMixingWeights) { EXPECT_TRUE(depth_mixing(*tiny("pre"), batches()).empty()); }

namespace {

// hybrid_pre (two streams) with OLMoE's sparse blocks: 4 experts, 2 per token.
model::Transformer tiny_moe() {
  torch::manual_seed(7);
  config::ModelConfig cfg = siamese::testing::tiny_model("hybrid_pre", {32, 2, 4, 60, 64, 16});
  cfg.rope = true;
  cfg.layer_norm_type = config::LayerNormType::RMS;
  cfg.include_bias = false;
  cfg.block_type = config::BlockType::Moe;
  cfg.moe_num_experts = 4;
  cfg.moe_top_k = 2;
  model::Transformer m(cfg);
  m->eval();
  return m;
}

}  // namespace

// The probes read a sparse model as any other: the head input's magnitude and the full-depth
// loss against direct computations, and each block's gradient norm counts its router and
// experts.
TEST(MoeBlocks, ProbesMeasureTheSparseModel) {
  auto m = tiny_moe();
  const auto b = batches();
  const auto mag = stream_magnitudes(*m, b);
  ASSERT_EQ(mag.by_stream.size(), 2u);
  for (const auto& [name, per_layer] : mag.by_stream) {
    ASSERT_EQ(per_layer.size(), 5u) << name;
    for (double v : per_layer) EXPECT_GT(v, 0.0) << name;
  }
  double head_input = 0, sum = 0;
  int64_t n = 0;
  {
    torch::NoGradGuard g;
    for (const auto& ids : b) {
      head_input += m->hidden(ids).norm(2, -1).mean().item<double>() / double(b.size());
      sum += torch::nn::functional::cross_entropy(
                 m->forward(ids).slice(1, 0, -1).reshape({-1, 64}), ids.slice(1, 1).reshape({-1}),
                 torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                 .item<double>();
      n += ids.size(0) * (ids.size(1) - 1);
    }
  }
  EXPECT_NEAR(mag.final_norm, head_input, 1e-5 * head_input);
  const auto curve = effective_depth(*m, b);
  ASSERT_EQ(curve.size(), 3u);
  EXPECT_NEAR(curve[0].loss, sum / n, 1e-5);
  const auto lens = logit_lens(*m, b);
  for (const char* s : {"x", "y"}) {
    EXPECT_GE(lens.agreement.at(s), 0.0);
    EXPECT_LE(lens.agreement.at(s), 1.0);
  }

  m->train();
  const auto ids = b[0];
  torch::nn::functional::cross_entropy(m->forward(ids).slice(1, 0, -1).reshape({-1, 64}),
                                       ids.slice(1, 1).reshape({-1}))
      .backward();
  const auto norms = per_layer_grad_norms(*m);
  double sq = 0;
  bool experts = false;
  for (const auto& kv : m->named_parameters())
    if (kv.key().rfind("blocks.1.", 0) == 0 || kv.key().rfind("topology.blocks.1.", 0) == 0) {
      sq += kv.value().grad().pow(2).sum().item<double>();
      experts = experts || kv.key() == "blocks.1.mlp.experts.ff_proj";
    }
  EXPECT_TRUE(experts);
  EXPECT_NEAR(norms[1], std::sqrt(sq), 1e-6 * std::sqrt(sq));
}
