// Dynamic loss scaling: the scale's rule (halve on overflow, double after a run of good
// steps) and exact unscaling, on the scaler itself.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "siamese/train/loss_scale.h"

using siamese::train::LossScaler;

TEST(LossScale, HalvesOnOverflowAndDoublesAfterGrowthIntervalGoodSteps) {
  LossScaler s(true, 16.0, /*growth_interval=*/3, torch::kCPU);
  const std::vector<bool> overflow = {true, false, false, false, false, true, true, false, false, false};
  const std::vector<double> expect = {8, 8, 8, 16, 16, 8, 4, 4, 4, 8};
  for (size_t i = 0; i < overflow.size(); ++i) {
    s.update(torch::tensor(overflow[i]));
    EXPECT_EQ(s.scale(), expect[i]) << "after update " << i;
  }
  EXPECT_EQ(s.good_steps(), 0);
  s.update(torch::tensor(false));
  EXPECT_EQ(s.good_steps(), 1);
  s.restore(1024.0, 2);
  s.update(torch::tensor(false));
  EXPECT_EQ(s.scale(), 2048.0);  // the restored count carries on
}

TEST(LossScale, ScaledBackwardUnscalesToTheSameGradientsExactly) {
  torch::manual_seed(0);
  auto w = torch::randn({5, 3}, torch::requires_grad());
  auto x = torch::randn({4, 5});
  torch::matmul(x, w).square().mean().backward();
  const auto plain = w.grad().clone();
  w.mutable_grad().reset();

  LossScaler s(true, 65536.0, 2000, torch::kCPU);
  s.scaled(torch::matmul(x, w).square().mean()).backward();
  EXPECT_FALSE(torch::equal(w.grad(), plain));
  s.unscale_({w});
  // A power-of-two scale changes only exponents: float32 gradients come back bit for bit.
  EXPECT_TRUE(torch::equal(w.grad(), plain));
}

TEST(LossScale, DisabledLeavesLossAndGradientsAlone) {
  LossScaler s(false, 65536.0, 2000, torch::kCPU);
  auto loss = torch::tensor(2.5);
  EXPECT_TRUE(torch::equal(s.scaled(loss), loss));
  s.update(torch::tensor(true));
  EXPECT_EQ(s.scale(), 1.0);
}
