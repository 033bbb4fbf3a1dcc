// RMSNorm's hand-written backward against the composite formula under autograd, in
// float64, with and without the affine weight and bias; DyT and Derf against their formulas
// and finite differences.
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>

#include "siamese/model/norm.h"
#include "support/rounding.h"

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
      (y * dy).sum().backward();
      (y_ref * dy).sum().backward();
      // The fused kernel against ATen's ops, each summing d = 24 squares for r and, in
      // backward, d products w dy xhat per row and 15 rows per weight: each side within
      // gamma_n of its absolute terms, n = d + 7 for xhat = x r (the mean, eps, rsqrt and
      // products), three times that for dx (the composite's backward takes r cubed beside a
      // sum of d products), 15 more for the weight's sum over rows.
      torch::NoGradGuard no_grad;
      const int64_t d = 24, rows = 15;
      const auto r = torch::rsqrt(x.pow(2).mean(-1, true) + 1e-5);
      const auto xhat = (x * r).abs();
      const auto w_abs = affine ? norm->weight.abs() : torch::ones({d}, torch::kDouble);
      const auto wdy = w_abs * dy.abs();
      const auto x_scale = r * (wdy + xhat * (wdy * xhat).mean(-1, true));
      const auto b_abs = bias ? norm->bias.abs() : torch::zeros({d}, torch::kDouble);
      using siamese::testing::sum_order_ratio;
      EXPECT_LE(sum_order_ratio(y, y_ref, xhat * w_abs + b_abs, d + 7), 1);
      EXPECT_LE(sum_order_ratio(x.grad(), x_ref.grad(), x_scale, 3 * (d + 7)), 1);
      if (affine) {
        const auto w_scale = (dy.abs() * xhat).sum(torch::IntArrayRef{0, 1});
        EXPECT_LE(sum_order_ratio(norm->weight.grad(), w_ref.grad(), w_scale, rows + d + 7), 1);
      }
      if (bias) {
        EXPECT_LE(
            sum_order_ratio(norm->bias.grad(), b_ref.grad(), dy.abs().sum(torch::IntArrayRef{0, 1}), rows),
            1);
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

// LayerNorm of a bf16 input computes in float32: under autocast the result stays float32
// (autocast's layer_norm), in a model cast to bf16 (weights bf16 too) it is bf16 again.
TEST(Norm, LayerNormOfBfloat16InputIsFloat32UnderAutocastAndBfloat16InACastModel) {
  Norm norm(NormKind::LayerNorm, 16, 1e-5, true, true);
  torch::manual_seed(2);
  auto x = (torch::randn({4, 16}) * 100).to(torch::kBFloat16);
  const auto expected = torch::layer_norm(x.to(torch::kFloat), {16}, norm->weight, norm->bias, 1e-5);
  {
    at::autocast::set_autocast_enabled(at::kCPU, true);
    const auto y = norm(x);
    at::autocast::set_autocast_enabled(at::kCPU, false);
    EXPECT_EQ(y.scalar_type(), torch::kFloat);
    // The fused kernel against ATen's layer_norm, both in float32 on the same values: the
    // mean and the variance sum d = 16 terms each, then eps, rsqrt, xhat, weight and bias,
    // so each side is within gamma_n, n = 2 d + 8, of r (|x| + mean |x|) |w| + |b|: x - mean
    // errs by the mean's rounding, not by one relative to itself.
    const auto xf = x.to(torch::kDouble);
    const auto centered = xf - xf.mean(-1, true);
    const auto r = torch::rsqrt(centered.pow(2).mean(-1, true) + 1e-5);
    const auto scale =
        r * (xf.abs() + xf.abs().mean(-1, true)) * norm->weight.detach().abs() + norm->bias.detach().abs();
    EXPECT_LE(siamese::testing::sum_order_ratio(y, expected, scale, 2 * 16 + 8), 1);
  }
  norm->to(torch::kBFloat16);
  const auto y = norm(x);
  EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
  EXPECT_LT((y.to(torch::kFloat) - expected).abs().max().item<double>(), 2e-2);
}

// DyT and Derf as their papers write them, and float64 central differences for the gradient
// of every input: x, weight, bias, alpha and (Derf) shift.
TEST(Norm, PointwiseNormsMatchTheirFormulasAndFiniteDifferenceGradients) {
  torch::manual_seed(4);
  for (NormKind kind : {NormKind::DyT, NormKind::Derf}) {
    SCOPED_TRACE(kind == NormKind::DyT ? "dyt" : "derf");
    Norm norm(kind, 12, 1e-5, /*affine=*/true, /*bias=*/true, /*alpha_init=*/0.7, /*shift_init=*/0.1);
    norm->to(torch::kDouble);
    EXPECT_FLOAT_EQ(norm->alpha.item<float>(), 0.7f);
    if (kind == NormKind::Derf) {
      EXPECT_FLOAT_EQ(norm->shift.item<float>(), 0.1f);
    } else {
      EXPECT_FALSE(norm->shift.defined());
    }
    {
      torch::NoGradGuard no_grad;
      norm->weight.uniform_(0.5, 1.5);
      norm->bias.uniform_(-0.5, 0.5);
    }
    auto x = (torch::randn({2, 3, 12}, torch::kDouble) * 2).requires_grad_();
    auto formula = [&](const torch::Tensor& in) {
      auto a = norm->alpha * in;
      auto h = kind == NormKind::DyT ? torch::tanh(a) : torch::erf(a + norm->shift);
      return h * norm->weight + norm->bias;
    };
    auto y = norm(x);
    EXPECT_LT((y - formula(x)).abs().max().item<double>(), 1e-15);
    auto dy = torch::randn_like(y);
    (y * dy).sum().backward();
    auto objective = [&] {
      torch::NoGradGuard no_grad;
      return (norm(x) * dy).sum().item<double>();
    };
    std::vector<std::pair<std::string, torch::Tensor>> inputs = {{"x", x}};
    for (auto& p : norm->named_parameters()) inputs.emplace_back(p.key(), p.value());
    EXPECT_EQ(inputs.size(), kind == NormKind::DyT ? 4u : 5u);
    for (auto& [name, t] : inputs) {
      auto flat = t.detach().view(-1);
      auto grad = t.grad().view(-1);
      for (int64_t i = 0; i < std::min<int64_t>(flat.numel(), 6); ++i) {
        const double h = 1e-6, v = flat[i].item<double>();
        flat[i] = v + h;
        const double up = objective();
        flat[i] = v - h;
        const double down = objective();
        flat[i] = v;
        EXPECT_NEAR(grad[i].item<double>(), (up - down) / (2 * h), 1e-7) << name << "[" << i << "]";
      }
    }
  }
}

TEST(Norm, PointwiseNormsOfBfloat16InputReturnBfloat16) {
  for (NormKind kind : {NormKind::DyT, NormKind::Derf}) {
    Norm norm(kind, 8, 1e-5, true, false);
    auto x = torch::randn({4, 8});
    auto y = norm(x.to(torch::kBFloat16));
    EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
    EXPECT_LT(
        (y.to(torch::kFloat) - norm(x.to(torch::kBFloat16).to(torch::kFloat))).abs().max().item<double>(),
        1e-2);
  }
}
