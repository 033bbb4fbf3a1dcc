// MoE balancing without an auxiliary loss (model.moe_router_bias_rate, DeepSeek-V3's router
// bias) and the sequence-wise load-balancing loss (moe_lb_loss_granularity instance), against
// OLMo-core's MoELinearRouter over several steps (tests/model/olmo_core_router.py): the same
// experts chosen, the same weights, the same loss and the same bias after every step's update.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "siamese/common/npy.h"
#include "siamese/model/aux_loss.h"
#include "siamese/model/moe_mlp.h"
#include "support/python_reference.h"
#include "support/temp_dir.h"
#include "support/tiny_configs.h"

namespace siamese::model {
namespace {

constexpr int kSteps = 6;

struct RouterCase {
  std::optional<double> bias_rate;
  config::LbLossGranularity granularity;
};

void expect_router_matches_olmo_core(const RouterCase& k) {
  config::ModelConfig cfg = siamese::testing::tiny_model("pre", {8, 2, 1, 61, 64, 32});
  cfg.block_type = config::BlockType::Moe;
  cfg.include_bias = false;
  cfg.mlp_hidden_size = 10;
  cfg.moe_num_experts = 4;
  cfg.moe_top_k = 2;
  cfg.moe_router_bias_rate = k.bias_rate;
  cfg.moe_lb_loss_granularity = k.granularity;
  torch::manual_seed(5);
  MoeMlp mlp(cfg);
  {
    torch::NoGradGuard g;
    for (auto& p : mlp->named_parameters()) p.value().copy_(0.3 * torch::randn_like(p.value()));
    // Skewed logits, so that the loads start uneven and the bias has something to correct.
    mlp->router->weight.copy_(torch::randn_like(mlp->router->weight) + 0.8);
  }
  siamese::testing::TempDir dir;
  write_npy(dir.file("weight.npy"), mlp->router->weight.detach());
  std::vector<torch::Tensor> xs;
  for (int s = 0; s < kSteps; ++s) {
    xs.push_back(torch::randn({3, 6, 8}));
    write_npy(dir.file("x" + std::to_string(s) + ".npy"), xs.back());
  }
  const nlohmann::json spec = {{"top_k", 2},
                               {"bias_gamma", k.bias_rate ? nlohmann::json(*k.bias_rate) : nlohmann::json()},
                               {"granularity", config::name_of(k.granularity)},
                               {"steps", kSteps}};
  std::ofstream(dir.file("spec.json")) << spec.dump();
  ASSERT_TRUE(siamese::testing::reference_ran("tests/model/olmo_core_router.py", dir.path().string(),
                                              dir.file("log")));
  bool moved = false;
  for (int s = 0; s < kSteps; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    const std::string n = std::to_string(s);
    const MoeOutput r = mlp->route(xs[s]);
    EXPECT_TRUE(torch::equal(r.experts, read_npy(dir.file("experts" + n + ".npy"))));
    EXPECT_LE((r.weights - read_npy(dir.file("weights" + n + ".npy"))).abs().max().item<double>(), 1e-6);
    // A sum over 18 tokens x 4 experts of products of probabilities and counts in float32.
    const double lb = read_npy(dir.file("lb" + n + ".npy")).item<double>();
    EXPECT_NEAR(r.load_balancing.item<double>(), lb, 1e-5 * std::abs(lb));
    // The step: the block records its loads, the record is reduced, the finisher moves the bias.
    AuxLosses aux{torch::Tensor(), 1.0};
    mlp->forward(xs[s], &aux);
    aux.values.reduce([](torch::Tensor&) {});
    if (k.bias_rate) {
      const auto want = read_npy(dir.file("bias" + n + ".npy"));
      EXPECT_TRUE(torch::equal(mlp->score_bias, want)) << mlp->score_bias << want;
      moved = moved || mlp->score_bias.abs().max().item<double>() > 0;
      // The loads entry is the bias's own: gone from what the step reports.
      EXPECT_FALSE(aux.values["moe_router_bias_loads.0"].defined());
    }
  }
  if (k.bias_rate) {
    EXPECT_TRUE(moved);
  }
}

TEST(MoeRouter, TheScoreBiasChoosesAndMovesAsOlmoCoresBiasGamma) {
  expect_router_matches_olmo_core({0.01, config::LbLossGranularity::LocalBatch});
}

TEST(MoeRouter, TheSequenceWiseBalanceLossIsOlmoCoresInstanceGranularity) {
  expect_router_matches_olmo_core({std::nullopt, config::LbLossGranularity::Instance});
  expect_router_matches_olmo_core({0.01, config::LbLossGranularity::Instance});
}

TEST(MoeRouter, WithoutTheRateThereIsNoBias) {
  config::ModelConfig cfg = siamese::testing::tiny_model("pre", {8, 2, 1, 61, 64, 32});
  cfg.block_type = config::BlockType::Moe;
  cfg.moe_num_experts = 4;
  MoeMlp mlp(cfg);
  EXPECT_FALSE(mlp->score_bias.defined());
  EXPECT_TRUE(mlp->named_buffers().is_empty());
}

}  // namespace
}  // namespace siamese::model
