// Analyses read through the probe hook and OLMo names: values against direct computations.
#include <gtest/gtest.h>

#include <cmath>

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
  ModelConfig cfg = siamese::testing::tiny_model(residual, {32, 2, layers, 60, 64, 16});
  cfg.rope = true;
  cfg.layer_norm_type = "rms";
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
