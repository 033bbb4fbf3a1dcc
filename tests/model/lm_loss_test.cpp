// OLMo's z-loss in the one loss function (lm_loss.h): value and gradient against the
// formula computed directly in float64, and the cross-entropy unchanged beside it.
#include <gtest/gtest.h>

#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "siamese/model/lm_loss.h"
#include "support/rounding.h"

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
  // Each lse sums V = 11 exponentials and takes a log: V + 3 roundings relative to lse (> 1
  // here). Squaring doubles that and the 10 squares' sum adds 10 more, one for the
  // multiplier: each side within gamma_n of z, n = 2 (V + 3) + 11.
  ASSERT_GT(lse.min().item<double>(), 1);
  const double z = multiplier * lse.pow(2).sum().item<double>();
  EXPECT_LE(std::abs(sums.z.item<double>() - z),
            2 * siamese::testing::gamma(2 * (11 + 3) + 11, torch::kFloat64) * z);
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
    // A log-probability x - lse rounds by gamma_{V+3} times 1 + 2 |lse| + |x - lse| (the
    // row's V exponentials, its log, the shift by the row's largest logit, the subtraction).
    // The loss sums N = 21 of them: each side within gamma_n of sum (|lse| + |x_target|),
    // n = V + N + 3. The gradient's p = exp(x - lse) errs by that relative to p, and p - 1
    // at the target by one rounding more. In float32 the bound is 5e-5 of the loss, where a
    // token lost or counted twice moves it by 5e-2.
    using siamese::testing::gamma;
    const auto rows = logits.detach().reshape({-1, 301}).to(torch::kFloat64);
    const auto lse = rows.logsumexp(-1, true);
    const auto log_p = rows - lse;
    const auto onehot = torch::one_hot(targets.reshape({-1}), 301).to(torch::kFloat64);
    const double loss_terms = (lse.abs().sum() + (rows * onehot).sum(-1).abs().sum()).item<double>();
    EXPECT_LE(std::abs(ours.item<double>() - theirs.item<double>()),
              2 * gamma(301 + 21 + 3, dtype) * loss_terms)
        << dtype;
    (ours / 21).backward();
    (theirs / 21).backward();
    const auto grad_terms = (log_p.exp() * (1 + 2 * lse.abs() + log_p.abs()) + onehot) / 21;
    EXPECT_LE(siamese::testing::sum_order_ratio(logits.grad().reshape({-1, 301}),
                                                reference.grad().reshape({-1, 301}), grad_terms, 301 + 3),
              1)
        << dtype;
  }
}

// The float32 CPU passes (kernels/softmax_cpu.h) on a learned model's rows: most
// log-probabilities far below -87, where ATen's exp turns subnormal. Loss, z-loss and gradient
// are the float64 formula's to float32 rounding, with gradients below FLT_MIN flushed to zero
// and none subnormal; rows of 1037 test the tails after the 16-wide lanes.
TEST(LmLoss, Float32CpuPassesMatchFloat64OnFarNegativeLogProbs) {
  torch::manual_seed(9);
  const double multiplier = 1e-3;
  const auto logits = (torch::randn({4, 9, 1037}) * 60).requires_grad_();
  const auto targets = torch::randint(0, 1037, {4, 9});
  const auto wide = logits.detach().to(torch::kFloat64);
  const auto log_probs = wide.log_softmax(-1);
  ASSERT_GT((log_probs < -104).to(torch::kFloat64).mean().item<double>(), 0.5);
  ASSERT_GT(((log_probs < -87) & (log_probs > -104)).sum().item<int64_t>(), 100);

  const LossSums sums = loss_sums(logits, targets, multiplier);
  const auto lse = wide.logsumexp(-1);
  const double nll = -log_probs.gather(-1, targets.unsqueeze(-1)).sum().item<double>();
  EXPECT_NEAR(sums.nll.item<double>() / nll, 1.0, 1e-6);
  EXPECT_NEAR(sums.z.item<double>() / (multiplier * lse.pow(2).sum().item<double>()), 1.0, 1e-6);

  (sums.total() / 36).backward();
  const auto softmax = log_probs.exp();
  const auto onehot = torch::one_hot(targets, 1037).to(torch::kFloat64);
  const auto expected = (softmax - onehot + 2 * multiplier * lse.unsqueeze(-1) * softmax) / 36;
  const auto grad = logits.grad().to(torch::kFloat64);
  // float32 log-probabilities of logits near 200 carry ulp(200) = 1.5e-5 of absolute error:
  // LibTorch's float32 gradient is off the float64 one by that much too, and ours may be too.
  const auto reference = logits.detach().clone().requires_grad_();
  const auto ref_lp = reference.log_softmax(-1);
  const auto ref_lse = reference.logsumexp(-1);
  ((-ref_lp.gather(-1, targets.unsqueeze(-1)).sum() + multiplier * ref_lse.pow(2).sum()) / 36).backward();
  const double theirs = (reference.grad().to(torch::kFloat64) - expected).abs().max().item<double>();
  const double ours = (grad - expected).abs().max().item<double>();
  EXPECT_LT(ours, 1.5 * theirs + 1e-9) << "LibTorch float32: " << theirs;
  EXPECT_LT(ours, 2e-5 * expected.abs().max().item<double>());
  const double flt_min = std::numeric_limits<float>::min();
  EXPECT_EQ(((grad != 0) & (grad.abs() < flt_min)).sum().item<int64_t>(), 0) << "subnormal gradients";
  EXPECT_GT((grad == 0).sum().item<int64_t>(), 0);
}

// bfloat16 logits (CPU autocast) are read as they are, not copied to float32: the loss is the
// float32 one of the same values, and the gradient comes back in bfloat16, the float32
// gradient rounded once.
TEST(LmLoss, Bfloat16LogitsOnTheCpuGiveTheFloat32LossAndARoundedGradient) {
  torch::manual_seed(12);
  const auto logits = (torch::randn({2, 5, 301}) * 6).to(torch::kBFloat16).requires_grad_();
  const auto targets = torch::randint(0, 301, {2, 5});
  const auto wide = logits.detach().to(torch::kFloat).requires_grad_();
  const LossSums ours = loss_sums(logits, targets, 1e-3), theirs = loss_sums(wide, targets, 1e-3);
  EXPECT_EQ(ours.nll.scalar_type(), torch::kFloat);
  EXPECT_NEAR(ours.nll.item<double>() / theirs.nll.item<double>(), 1.0, 1e-6);
  EXPECT_NEAR(ours.z.item<double>() / theirs.z.item<double>(), 1.0, 1e-6);
  (ours.total() / 10).backward();
  (theirs.total() / 10).backward();
  ASSERT_EQ(logits.grad().scalar_type(), torch::kBFloat16);
  const auto rounded = wide.grad().to(torch::kBFloat16).to(torch::kFloat);
  EXPECT_LE((logits.grad().to(torch::kFloat) - rounded).abs().max().item<double>(),
            std::ldexp(rounded.abs().max().item<double>(), -8));
}

// The CPU allocator, counting the bytes it has handed out and not yet had back, and their
// peak; installed for its lifetime. The counts outlive it: what it allocated may be freed later.
class CountingCpuAllocator final : public c10::Allocator {
 public:
  CountingCpuAllocator() : inner_(c10::GetCPUAllocator()) { c10::SetCPUAllocator(this, kPriority); }
  ~CountingCpuAllocator() override { c10::SetCPUAllocator(inner_, kPriority); }

  c10::DataPtr allocate(size_t n) override {
    auto held = std::make_unique<Held>(Held{inner_->allocate(n), n, counts_});
    const int64_t now = counts_->live += int64_t(n);
    int64_t peak = counts_->peak;
    while (now > peak && !counts_->peak.compare_exchange_weak(peak, now)) {
    }
    void* data = held->inner.get();
    return {data, held.release(), &release, c10::Device(c10::kCPU)};
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  int64_t live() const { return counts_->live; }
  int64_t peak() const { return counts_->peak; }
  void reset_peak() { counts_->peak = counts_->live.load(); }

 private:
  static constexpr uint8_t kPriority = 200;
  struct Counts {
    std::atomic<int64_t> live{0}, peak{0};
  };
  struct Held {
    c10::DataPtr inner;
    size_t n;
    std::shared_ptr<Counts> counts;
  };
  static void release(void* p) {
    std::unique_ptr<Held> held(static_cast<Held*>(p));
    held->counts->live -= int64_t(held->n);
  }
  c10::Allocator* inner_;
  std::shared_ptr<Counts> counts_ = std::make_shared<Counts>();
};

// What the loss keeps for backward is two floats a row, not the [N, V] log-probabilities: its
// forward never holds a logits-sized buffer of its own (a 410 MB one per micro-batch of
// base.yaml), and the gradient is the one [N, V] buffer backward allocates.
TEST(LmLoss, ForwardAllocatesNoLogitsSizedBufferOnTheCpu) {
  torch::manual_seed(5);
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    const auto logits = (torch::randn({64, 4096}) * 4).to(dtype).requires_grad_();
    const auto targets = torch::randint(0, 4096, {64});
    const int64_t logits_bytes = logits.numel() * int64_t(sizeof(float));
    CountingCpuAllocator counting;
    const int64_t before = counting.live();
    LossSums sums = loss_sums(logits, targets, 1e-4);
    EXPECT_LT(counting.peak() - before, logits_bytes / 8) << dtype;
    EXPECT_LT(counting.live() - before, logits_bytes / 8) << dtype;
    counting.reset_peak();
    sums.total().backward();
    EXPECT_LT(counting.peak() - before, logits.numel() * logits.element_size() + logits_bytes / 8) << dtype;
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
