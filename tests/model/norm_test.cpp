// RMSNorm's hand-written backward against the composite formula under autograd, in
// float64, with and without the affine weight and bias.
#include <gtest/gtest.h>

#include "siamese/model/norm.h"

using namespace siamese::model;

namespace {

torch::Tensor composite_rms(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                            double eps) {
  auto h = x * torch::rsqrt(x.pow(2).mean(-1, true) + eps);
  if (w.defined()) h = h * w;
  return b.defined() ? h + b : h;
}

}  // namespace

TEST(Norm, RmsNormMatchesTheCompositeFormulaInValueAndGradient) {
  torch::manual_seed(3);
  for (bool affine : {false, true})
    for (bool bias : {false, true}) {
      if (bias && !affine) continue;
      Norm norm(NormKind::RMS, 24, 1e-5, affine, bias);
      norm->to(torch::kDouble);
      {
        torch::NoGradGuard no_grad;
        if (affine) norm->weight.uniform_(0.5, 1.5);
        if (bias) norm->bias.uniform_(-0.5, 0.5);
      }
      auto x = (torch::randn({3, 5, 24}, torch::kDouble) * 3).requires_grad_();
      auto x_ref = x.detach().clone().requires_grad_();
      auto w_ref = affine ? norm->weight.detach().clone().requires_grad_() : torch::Tensor();
      auto b_ref = bias ? norm->bias.detach().clone().requires_grad_() : torch::Tensor();
      auto dy = torch::randn({3, 5, 24}, torch::kDouble);
      auto y = norm(x), y_ref = composite_rms(x_ref, w_ref, b_ref, 1e-5);
      EXPECT_LT((y - y_ref).abs().max().item<double>(), 1e-14);
      (y * dy).sum().backward();
      (y_ref * dy).sum().backward();
      EXPECT_LT((x.grad() - x_ref.grad()).abs().max().item<double>(), 1e-13);
      if (affine) {
        EXPECT_LT((norm->weight.grad() - w_ref.grad()).abs().max().item<double>(), 1e-13);
      }
      if (bias) {
        EXPECT_LT((norm->bias.grad() - b_ref.grad()).abs().max().item<double>(), 1e-13);
      }
    }
}

TEST(Norm, RmsNormOfBfloat16InputComputesInFloat32AndReturnsBfloat16) {
  Norm norm(NormKind::RMS, 16, 1e-5, true, false);
  auto x = torch::randn({4, 16}) * 100;
  auto y = norm(x.to(torch::kBFloat16));
  EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
  auto expected = composite_rms(x.to(torch::kBFloat16).to(torch::kFloat), norm->weight, {}, 1e-5);
  EXPECT_LT((y.to(torch::kFloat) - expected).abs().max().item<double>(), 1e-2);
}
