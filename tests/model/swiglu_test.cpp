// The MLP's fused SwiGLU (kernels/swiglu.h) against LibTorch's silu(gate) * value: the same MLP
// run once as it is and once with an identity swiglu hook (which keeps LibTorch's form), in
// value and in every gradient, on the CPU and (suite GpuSwiglu) on CUDA. Gates reach +-80 so that the
// sigmoid's exp clamps run, and the inner width 37 leaves a tail after the vector lanes.
#include <gtest/gtest.h>

#include "siamese/config/config.h"
#include "siamese/model/mlp.h"

namespace siamese::model {
namespace {

struct MlpPair {
  Mlp fused{nullptr}, reference{nullptr};
  MlpPair(torch::ScalarType dtype, torch::Device device) {
    config::ModelConfig cfg;
    cfg.d_model = 24;
    cfg.mlp_hidden_size = 74;
    cfg.activation_type = config::Activation::SwiGLU;
    cfg.include_bias = false;
    SublayerHooks identity;
    identity.swiglu = [](const torch::Tensor& value, const torch::Tensor& gate) {
      return SublayerHooks::Pair{value, gate};
    };
    torch::manual_seed(17);
    fused = Mlp(cfg, SublayerHooks{});
    reference = Mlp(cfg, identity);
    torch::NoGradGuard no_grad;
    for (auto* mlp : {&fused, &reference}) {
      torch::manual_seed(18);
      for (auto& p : (*mlp)->parameters()) p.normal_(0, 1);
      (*mlp)->to(device, dtype);
    }
  }
};

double relative(const torch::Tensor& ours, const torch::Tensor& theirs) {
  return ((ours.to(torch::kDouble) - theirs.to(torch::kDouble)).abs().max() /
          theirs.to(torch::kDouble).abs().max())
      .item<double>();
}

void expect_same_mlp(torch::ScalarType dtype, double tol, torch::Device device = torch::kCPU) {
  MlpPair mlps(dtype, device);
  torch::manual_seed(19);
  const auto x = (torch::randn({3, 11, 24}) * 5).to(device, dtype).requires_grad_();
  const auto x_ref = x.detach().clone().requires_grad_();
  const auto y = mlps.fused(x), y_ref = mlps.reference(x_ref);
  const auto gate = torch::linear(x_ref, mlps.reference->ff_proj->weight).chunk(2, -1)[1];
  ASSERT_GT(gate.abs().max().item<double>(), 80) << "the test needs gates past the exp clamps";
  EXPECT_LT(relative(y, y_ref), tol);
  const auto dy = torch::randn(y.sizes()).to(device, dtype);
  (y * dy).sum().backward();
  (y_ref * dy).sum().backward();
  EXPECT_LT(relative(x.grad(), x_ref.grad()), tol);
  const auto ours = mlps.fused->parameters(), theirs = mlps.reference->parameters();
  for (size_t i = 0; i < ours.size(); ++i) EXPECT_LT(relative(ours[i].grad(), theirs[i].grad()), tol) << i;
}

TEST(Swiglu, FusedFloat32MatchesLibTorch) { expect_same_mlp(torch::kFloat, 1e-6); }

// bfloat16 rounds each output once, LibTorch's form once per op.
TEST(Swiglu, FusedBfloat16MatchesLibTorch) { expect_same_mlp(torch::kBFloat16, 2e-2); }

TEST(GpuSwiglu, FusedMatchesLibTorchOnCuda) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  expect_same_mlp(torch::kFloat, 1e-6, torch::kCUDA);
  expect_same_mlp(torch::kBFloat16, 2e-2, torch::kCUDA);
}

}  // namespace
}  // namespace siamese::model
