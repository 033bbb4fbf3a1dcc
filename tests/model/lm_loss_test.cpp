// OLMo's z-loss in the one loss function (lm_loss.h): value and gradient against the
// formula computed directly in float64, and the cross-entropy unchanged beside it.
#include <gtest/gtest.h>

#include "siamese/model/lm_loss.h"

namespace siamese::model {
namespace {

// Logits [2, 5, 11] of mixed scale (z-loss matters when logsumexp is far from 0) and targets.
struct ZLossProblem {
  torch::Tensor logits, targets;
  ZLossProblem() {
    torch::manual_seed(21);
    logits = (torch::randn({2, 5, 11}, torch::kFloat64) * 3 + 4).requires_grad_();
    targets = torch::randint(0, 11, {2, 5});
  }
};

TEST(LmLoss, ZLossValueAndGradientMatchTheFormulaInFloat64) {
  const double multiplier = 3e-2;
  ZLossProblem p;
  const LossSums sums = loss_sums(p.logits, p.targets, multiplier);
  ASSERT_TRUE(sums.z.defined());
  // Directly: log of the sum of exponentials, squared, summed over the 10 positions.
  const auto lse = p.logits.detach().exp().sum(-1).log();
  EXPECT_NEAR(sums.z.item<double>(), multiplier * lse.pow(2).sum().item<double>(), 1e-12);
  EXPECT_NEAR(sums.nll.item<double>(), nll_sum(p.logits, p.targets).item<double>(), 1e-12);
  EXPECT_NEAR(sums.total().item<double>(), sums.nll.item<double>() + sums.z.item<double>(), 1e-12);

  // d/dx [-log softmax(x)_t + m lse(x)^2] = softmax(x) - onehot(t) + 2 m lse(x) softmax(x).
  sums.total().backward();
  const auto softmax = p.logits.detach().softmax(-1);
  const auto onehot = torch::one_hot(p.targets, 11).to(torch::kFloat64);
  const auto expected = softmax - onehot + 2 * multiplier * lse.unsqueeze(-1) * softmax;
  EXPECT_LT((p.logits.grad() - expected).abs().max().item<double>(), 1e-12);
}

// Half-precision logits are widened as for the cross-entropy: the float32 z-loss is the
// float64 one to float32 precision.
TEST(LmLoss, ZLossOfFloat32LogitsIsComputedInFloat32) {
  ZLossProblem p;
  const auto narrow = p.logits.detach().to(torch::kBFloat16);
  const LossSums wide = loss_sums(narrow.to(torch::kFloat64), p.targets, 1e-4);
  const LossSums ours = loss_sums(narrow, p.targets, 1e-4);
  EXPECT_EQ(ours.z.scalar_type(), torch::kFloat32);
  EXPECT_NEAR(ours.z.item<double>() / wide.z.item<double>(), 1.0, 1e-6);
}

// Without a multiplier there is no z-loss and the objective is the cross-entropy itself.
TEST(LmLoss, NoZLossUnlessAsked) {
  ZLossProblem p;
  const LossSums sums = loss_sums(p.logits, p.targets);
  EXPECT_FALSE(sums.z.defined());
  EXPECT_TRUE(torch::equal(sums.total(), sums.nll));
}

// The loss is one autograd node of its own (a shorter backward than cross_entropy's): its
// value and gradient under a non-unit upstream gradient are LibTorch's cross_entropy's.
TEST(LmLoss, CrossEntropyAndGradientAreLibTorchs) {
  torch::manual_seed(5);
  for (const auto dtype : {torch::kFloat32, torch::kFloat64}) {
    const auto logits = (torch::randn({3, 7, 301}, dtype) * 4).requires_grad_();
    const auto targets = torch::randint(0, 301, {3, 7});
    const auto reference = logits.detach().clone().requires_grad_();
    const auto ours = loss_sums(logits, targets).nll;
    const auto theirs = torch::nn::functional::cross_entropy(
        reference.reshape({-1, 301}), targets.reshape({-1}),
        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
    const double tol = dtype == torch::kFloat32 ? 1e-6 : 1e-13;
    EXPECT_NEAR(ours.item<double>() / theirs.item<double>(), 1.0, tol);
    (ours / 21).backward();
    (theirs / 21).backward();
    EXPECT_LT((logits.grad() - reference.grad()).abs().max().item<double>(),
              tol * reference.grad().abs().max().item<double>());
  }
}

// Backward through the z-loss alone (the cross-entropy's gradient slot left empty):
// 2 m lse(x) softmax(x).
TEST(LmLoss, ZLossAloneHasItsOwnGradient) {
  ZLossProblem p;
  loss_sums(p.logits, p.targets, 0.5).z.backward();
  const auto lse = p.logits.detach().logsumexp(-1, true);
  const auto expected = 2 * 0.5 * lse * p.logits.detach().softmax(-1);
  EXPECT_LT((p.logits.grad() - expected).abs().max().item<double>(), 1e-12);
}

}  // namespace
}  // namespace siamese::model
