// The one training step (train_step.h) that train and bench run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "siamese/dist/gradient_sync.h"
#include "siamese/model/lm_loss.h"
#include "siamese/model/transformer.h"
#include "siamese/train/loss_scale.h"
#include "siamese/train/optimizer.h"
#include "siamese/train/train_step.h"
#include "support/tiny_configs.h"

namespace siamese::train {
namespace {

struct Subject {
  model::Transformer model{nullptr};
  std::unique_ptr<AdamW> optim;
  GradientSync sync;
  std::unique_ptr<LossScaler> scaler;

  explicit Subject(const TrainConfig& c) {
    torch::manual_seed(5);
    model = model::Transformer(c.model);
    optim = build_optimizer(c.optimizer, model->named_parameters());
    scaler = std::make_unique<LossScaler>(false, 1.0, 1, torch::kCPU);
  }
  TrainStep step(const TrainConfig& c, int64_t micro) {
    return TrainStep(c, *model, *optim, sync, *scaler, torch::kCPU, micro);
  }
};

TrainConfig no_dropout() {
  auto c = testing::tiny("unused");
  c.model.attention_dropout = c.model.residual_dropout = c.model.embedding_dropout = 0.0;
  return c;
}

torch::Tensor batch_of(const TrainConfig& c) {
  torch::manual_seed(9);
  return torch::randint(0, c.model.vocab_size, {c.global_train_batch_size, c.model.max_sequence_length});
}

// Micro-batches only split the work: the loss is the global batch's mean and the update the
// one the whole batch gives.
TEST(TrainStep, MicroBatchesGiveTheWholeBatchsLossAndUpdate) {
  const auto c = no_dropout();
  const auto batch = batch_of(c);
  Subject whole(c), split(c);
  auto one = whole.step(c, 4), two = split.step(c, 1);
  const auto a = one.run(batch, 1e-3), b = two.run(batch, 1e-3);
  torch::NoGradGuard no_grad;
  const auto mean = model::lm_loss_sum(*whole.model, batch).item<double>();  // after the update
  EXPECT_NEAR(a.loss.item<double>(), b.loss.item<double>(), 1e-6);
  EXPECT_NEAR(a.grad_norm.item<double>(), b.grad_norm.item<double>(), 1e-5);
  EXPECT_EQ(a.loss_scale.item<double>(), 1.0);
  const auto pa = whole.model->named_parameters(), pb = split.model->named_parameters();
  for (const auto& kv : pa) EXPECT_TRUE(torch::allclose(kv.value(), pb[kv.key()], 1e-5, 1e-6)) << kv.key();
  EXPECT_LT(mean / double(4 * 31), a.loss.item<double>());  // the step lowered the loss
}

// A step whose loss is not finite leaves every weight as it was: its update is cancelled on
// the device.
TEST(TrainStep, NonFiniteLossLeavesTheWeightsAlone) {
  const auto c = no_dropout();
  Subject s(c);
  auto step = s.step(c, 2);
  step.run(batch_of(c), 1e-3);  // optimizer state exists
  {
    torch::NoGradGuard no_grad;
    s.model->named_parameters()["wte.weight"][3][0] = std::numeric_limits<float>::quiet_NaN();
  }
  std::map<std::string, torch::Tensor> before;
  for (const auto& kv : s.model->named_parameters()) before[kv.key()] = kv.value().clone();
  auto ids = batch_of(c);
  ids[0][0] = 3;
  const auto r = step.run(ids, 1e-3);
  EXPECT_FALSE(std::isfinite(r.loss.item<double>()));
  for (const auto& kv : s.model->named_parameters())
    EXPECT_TRUE(torch::equal(kv.value().nan_to_num(), before[kv.key()].nan_to_num())) << kv.key();
}

// nGPT keeps its matrices on the unit sphere: the step's AdamW update moves them off, and the
// topology's project_weights, which the step calls after the optimizer, brings every
// embedding and head row, att_proj and ff_proj row and attn_out and ff_out column back.
TEST(TrainStep, NgptWeightsAreUnitNormAfterTheOptimizerStep) {
  auto c = no_dropout();
  c.model.residual = "ngpt";
  c.model.use_query_norm = c.model.use_key_norm = c.model.use_value_norm = false;
  c.model.weight_tying = false;
  Subject s(c);
  std::vector<std::pair<std::string, int64_t>> matrices = {{"wte.weight", 1}, {"ff_out.weight", 1}};
  for (int64_t l = 0; l < c.model.n_layers; ++l) {
    const std::string b = "blocks." + std::to_string(l) + ".";
    matrices.insert(matrices.end(), {{b + "attn.att_proj.weight", 1},
                                     {b + "attn.attn_out.weight", 0},
                                     {b + "mlp.ff_proj.weight", 1},
                                     {b + "mlp.ff_out.weight", 0}});
  }
  auto params = s.model->named_parameters();
  std::map<std::string, torch::Tensor> before;
  for (const auto& [name, dim] : matrices) before[name] = params[name].detach().clone();
  auto step = s.step(c, 2);
  for (int i = 0; i < 3; ++i) step.run(batch_of(c), 1e-2);
  double worst = 0.0, least_moved = 1.0;
  for (const auto& [name, dim] : matrices) {
    const auto& w = params[name];
    const double off = (w.norm(2, dim) - 1).abs().max().item<double>();
    const double moved = (w - before[name]).abs().max().item<double>();
    EXPECT_LT(off, 1e-6) << name;
    EXPECT_GT(moved, 1e-3) << name << " did not train";
    worst = std::max(worst, off);
    least_moved = std::min(least_moved, moved);
  }
  // Control: the optimizer's update alone leaves the sphere.
  s.optim->zero_grad();
  model::lm_loss_sum(*s.model, batch_of(c)).backward();
  s.optim->update();
  double off_without = 0.0;
  for (const auto& [name, dim] : matrices)
    off_without = std::max(off_without, (params[name].norm(2, dim) - 1).abs().max().item<double>());
  EXPECT_GT(off_without, 1e-3);
  std::cout << "[ngpt step] after 3 steps at lr 1e-2: max | ||row|| - 1 | = " << worst
            << ", every matrix moved by at least " << least_moved << "; a bare AdamW update: " << off_without
            << "\n";
}

}  // namespace
}  // namespace siamese::train
