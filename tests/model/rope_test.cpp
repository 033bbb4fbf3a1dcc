// RoPE's CUDA kernel (src/kernels/rope_kernel.h) against the composite rotation on the CPU:
// queries and keys as the attention hands them over (a transposed view of the projection), at
// an offset and at per-row positions, in float32 and bf16, values and gradients (ctest label
// gpu; skips without a CUDA device).
#include <gtest/gtest.h>

#include "siamese/model/rope.h"

namespace siamese::model {
namespace {

double max_abs(const torch::Tensor& t) { return t.abs().max().item<double>(); }

TEST(GpuRope, KernelMatchesTheCpuRotationInValueAndGradient) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t B = 2, T = 37, H = 3, hd = 16;
  torch::manual_seed(11);
  const auto positions = torch::randint(0, T, {B, T}, torch::kInt64);
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    for (const bool per_row : {false, true}) {
      // [B, T, H, hd] as projected, viewed as [B, H, T, hd]: not contiguous.
      const auto base = torch::randn({B, T, H, hd}).to(dtype);
      const auto weights = torch::randn({B, H, T, hd});
      auto rotated = [&](const torch::Device& device, torch::Tensor& grad) {
        Rope rope(hd, 10000.0, /*full_precision=*/true);
        auto leaf = base.to(device).detach().requires_grad_(true);
        const auto t = leaf.transpose(1, 2);
        const auto out = per_row ? rope.apply(t, t, positions.to(device)).first : rope.apply(t, t, 5).first;
        (out.to(torch::kFloat) * weights.to(device)).sum().backward();
        grad = leaf.grad().cpu();
        EXPECT_EQ(out.scalar_type(), dtype);
        return out.cpu();
      };
      torch::Tensor grad_cpu, grad_gpu;
      const auto want = rotated(torch::kCPU, grad_cpu), got = rotated(torch::kCUDA, grad_gpu);
      // One float32 rounding apart before the cast, so bf16 results differ by one bf16 step
      // at most (2^-8 of the value).
      const double tol = dtype == torch::kFloat ? 1e-6 : 1e-2;
      EXPECT_LE(max_abs(got.to(torch::kFloat) - want.to(torch::kFloat)),
                tol * max_abs(want.to(torch::kFloat)))
          << dtype << " per_row " << per_row;
      EXPECT_LE(max_abs(grad_gpu.to(torch::kFloat) - grad_cpu.to(torch::kFloat)),
                tol * max_abs(grad_cpu.to(torch::kFloat)))
          << dtype << " per_row " << per_row;
    }
  }
}

}  // namespace
}  // namespace siamese::model
