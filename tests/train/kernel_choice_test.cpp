// model.kernels.*: a run with every custom kernel family switched to its ATen composition
// trains the same model as with the kernels, to rounding.
#include "siamese/model/kernel_choice.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "siamese/kernels/families.h"
#include "siamese/train/trainer.h"
#include "support/run_files.h"
#include "support/temp_dir.h"
#include "support/tiny_configs.h"

namespace {

using namespace siamese;

TEST(KernelChoice, AFamilysOwnKeyBeatsAll) {
  config::KernelsConfig k;
  EXPECT_EQ(model::kernel_choice(k, kernels::Family::Swiglu), config::KernelChoice::Fused);
  k.all = config::KernelChoice::Aten;
  k.rope = config::KernelChoice::Fused;
  EXPECT_EQ(model::kernel_choice(k, kernels::Family::Swiglu), config::KernelChoice::Aten);
  EXPECT_EQ(model::kernel_choice(k, kernels::Family::Rope), config::KernelChoice::Fused);
  const kernels::KernelSwitches restore;
  model::use_kernels(k);
  EXPECT_FALSE(kernels::enabled(kernels::Family::Norm));
  EXPECT_TRUE(kernels::enabled(kernels::Family::Rope));
}

// RMSNorm, SwiGLU, the cross-entropy, RoPE and SiameseNorm's stream update all take their
// kernels in float32 on the CPU. Each op agrees with its composite to the op table's float32
// tolerance, 4 eps + (n + 8) eps for a sum of n terms, the widest being the cross-entropy's
// over the 256-token vocabulary (3.2e-5); the first step's loss is that one sum. Later steps
// add the updates' differences, which AdamW's normalisation keeps at the same relative size
// while gradients are not near zero: ten times the bound covers the 8 steps.
TEST(KernelChoice, EveryFamilyOnAtenTrainsTheLossesOfTheKernels) {
  const kernels::KernelSwitches restore;
  auto fused = siamese::testing::tiny(siamese::testing::fresh_dir("kernel_choice_test", "fused"));
  fused.model.layer_norm_type = config::LayerNormType::RMS;
  fused.model.attention_dropout = fused.model.residual_dropout = 0;
  auto aten = fused;
  aten.save_folder = siamese::testing::fresh_dir("kernel_choice_test", "aten").string();
  aten.model.kernels.all = config::KernelChoice::Aten;
  ASSERT_EQ(train::train(fused), 0);
  ASSERT_EQ(train::train(aten), 0);
  const auto a = siamese::testing::losses(fused.save_folder), b = siamese::testing::losses(aten.save_folder);
  ASSERT_EQ(a.size(), 8u);
  ASSERT_EQ(b.size(), a.size());
  const double eps = std::numeric_limits<float>::epsilon();
  const double bound = 10 * (4 * eps + (256 + 8) * eps);
  bool any_differs = false;
  for (const auto& [step, text] : a) {
    const double x = std::stod(text), y = std::stod(b.at(step));
    EXPECT_LE(std::abs(x - y), bound * std::abs(x)) << "step " << step;
    any_differs = any_differs || text != b.at(step);
  }
  // The switch took effect: the compositions round differently somewhere.
  EXPECT_TRUE(any_differs);
}

}  // namespace
