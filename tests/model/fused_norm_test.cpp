// The fused RMSNorm and SiameseNorm stream update (kernels/fused_norm.h, and the stream
// update's autograd node, model/stream_update.h) against independent ATen composites under
// autograd, forward and backward: on CPU in float64 (to rounding), float32
// and bfloat16, with and without weights, each norm on and off, RMSNorm and LayerNorm (ATen's
// layer_norm as the reference), incoming gradients missing;
// finite differences in float64; and (suites named Gpu*) the CUDA kernels on a GPU.
#include "siamese/kernels/fused_norm.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "siamese/model/norm.h"
#include "siamese/model/stream_update.h"

using namespace siamese::model;
using torch::Tensor;

namespace {

constexpr double kEps = 1e-5;

torch::ScalarType compute_type(torch::ScalarType t) {
  return t == torch::kDouble ? torch::kDouble : torch::kFloat;
}

// OLMo's RMSLayerNorm written out, in x's precision.
Tensor composite_rms(const Tensor& x, const Tensor& w, double eps) {
  auto h = x * torch::rsqrt(x.pow(2).mean(-1, true) + eps);
  return w.defined() ? h * w : h;
}

// The composite in float32 for half inputs, rounded back to the input's dtype like the
// fused path; the identity of the ops for float32 and float64.
Tensor composite_rms_as_stored(const Tensor& x, const Tensor& w, double eps) {
  const auto c = compute_type(x.scalar_type());
  return composite_rms(x.to(c), w.defined() ? w.to(c) : w, eps).to(x.scalar_type());
}

// max |a - b| / max |b| over all elements, in float64 on the CPU.
double rel_err(const Tensor& a, const Tensor& b) {
  const auto ad = a.detach().to(torch::kCPU, torch::kDouble);
  const auto bd = b.detach().to(torch::kCPU, torch::kDouble);
  const double scale = bd.abs().max().item<double>();
  const double diff = (ad - bd).abs().max().item<double>();
  return scale > 0 ? diff / scale : diff;
}

void expect_close(const Tensor& got, const Tensor& want, double tol) { EXPECT_LT(rel_err(got, want), tol); }

struct Tol {
  double fwd, grad;
};
Tol tolerance(torch::ScalarType t) {
  if (t == torch::kDouble) return {1e-13, 1e-12};
  if (t == torch::kFloat) return {2e-6, 1e-5};
  return {1e-2, 2e-2};  // a bfloat16 / float16 rounding is 2^-8 / 2^-11 relative
}

Tensor random(std::vector<int64_t> sizes, torch::Device dev, torch::ScalarType t, double scale = 1) {
  return (torch::randn(sizes, torch::TensorOptions().dtype(compute_type(t)).device(dev)) * scale).to(t);
}

Tensor leaf(const Tensor& t) { return t.defined() ? t.detach().clone().requires_grad_() : t; }

// A norm's fused forward and backward against the composite under autograd: RMSNorm, or
// LayerNorm (ATen's layer_norm) when centered, its output in float32 for a half input when
// float_out.
void check_norm(torch::Device dev, torch::ScalarType t, std::vector<int64_t> sizes, bool weighted,
                bool centered = false, bool float_out = false) {
  SCOPED_TRACE(std::string(c10::toString(t)) + " d=" + std::to_string(sizes.back()) +
               (weighted ? " weighted" : " unweighted") + (centered ? " LayerNorm" : " RMSNorm") +
               (float_out ? " float out" : ""));
  const int64_t d = sizes.back();
  const auto x = (random(sizes, dev, t, 3) + (centered ? 2 : 0)).to(t);
  const auto w = weighted ? random({d}, dev, compute_type(t)).mul(0.5).add(1) : Tensor();
  const auto c = compute_type(t);
  const auto out_type = float_out ? c : t;
  const auto dy = random(sizes, dev, out_type);
  const auto out = siamese::kernels::norm_forward(x, w, kEps, centered, float_out);
  const auto g = siamese::kernels::norm_backward(dy, x, out.r, out.mu, w);

  auto x_ref = leaf(x.to(c)), w_ref = leaf(w.defined() ? w.to(c) : w);
  const auto y_ref =
      centered ? torch::layer_norm(x_ref, {d}, w_ref, {}, kEps) : composite_rms(x_ref, w_ref, kEps);
  (y_ref * dy.to(c)).sum().backward();

  const auto tol = tolerance(t);
  EXPECT_EQ(out.y.scalar_type(), out_type);
  EXPECT_EQ(out.y.sizes(), x.sizes());
  // A float output carries no rounding to t: only the input's.
  expect_close(out.y, y_ref, float_out ? tolerance(c).fwd : tol.fwd);
  const auto mean = centered ? x.to(c).mean(-1, true) : torch::zeros({1}, x.options().dtype(c));
  EXPECT_LT(rel_err(out.r, torch::rsqrt((x.to(c) - mean).pow(2).mean(-1, true) + kEps)), tol.fwd);
  EXPECT_EQ(out.mu.defined(), centered);
  if (centered) {
    EXPECT_LT(rel_err(out.mu, mean), tol.fwd);
  }
  EXPECT_EQ(g.dx.scalar_type(), t);
  expect_close(g.dx, x_ref.grad(), tol.grad);
  if (weighted) {
    EXPECT_EQ(g.dw.scalar_type(), w.scalar_type());
    expect_close(g.dw, w_ref.grad(), tol.grad);
  } else {
    EXPECT_FALSE(g.dw.defined());
  }
}

// Which outputs of the stream update the loss reads (the rest get no gradient).
struct Used {
  bool x, y, nx, ny;
};

// The norm a stream update checks: RMSNorm, or LayerNorm when centered.
Tensor reference_norm(const Tensor& x, const Tensor& w, bool centered) {
  if (!centered) return composite_rms_as_stored(x, w, kEps);
  const auto c = compute_type(x.scalar_type());
  const int64_t d = x.size(-1);
  return torch::layer_norm(x.to(c), {d}, w.defined() ? w.to(c) : w, {}, kEps).to(x.scalar_type());
}

// The stream update through its autograd node against the composite
//   x' = x + alpha o,  y' = y + o,  nx = norm(x'),  ny = norm(y')
// with the streams rounded to their dtype before the norms read them, as stored streams are.
// The streams are offset from zero so that a LayerNorm's centering matters.
void check_stream_update(torch::Device dev, torch::ScalarType t, std::vector<int64_t> sizes, bool on_x,
                         bool on_y, bool weighted, Used used, bool shared_input = false,
                         bool centered = false) {
  SCOPED_TRACE(std::string(c10::toString(t)) + (centered ? " LayerNorm" : " RMSNorm") + " norms " +
               std::to_string(on_x) + std::to_string(on_y) + (weighted ? " weighted" : "") + " used " +
               std::to_string(used.x) + std::to_string(used.y) + std::to_string(used.nx) +
               std::to_string(used.ny) + (shared_input ? " x is y" : ""));
  const int64_t d = sizes.back();
  const double alpha = 0.37;
  const auto x = (random(sizes, dev, t, 2) + 1.5).to(t), o = random(sizes, dev, t);
  const auto y = shared_input ? x : (random(sizes, dev, t, 2) - 0.75).to(t);
  const auto wx = on_x && weighted ? random({d}, dev, compute_type(t)).mul(0.5).add(1) : Tensor();
  const auto wy = on_y && weighted ? random({d}, dev, compute_type(t)).mul(0.5).add(1) : Tensor();
  std::vector<Tensor> cot;  // the loss's cotangents of x', y', nx, ny
  for (int i = 0; i < 4; ++i) cot.push_back(random(sizes, dev, t));
  auto loss = [&](const Tensor& xo, const Tensor& yo, const Tensor& nx, const Tensor& ny) {
    auto l = torch::zeros({}, cot[0].options().dtype(torch::kDouble));
    if (used.x) l = l + (xo.to(torch::kDouble) * cot[0].to(torch::kDouble)).sum();
    if (used.y) l = l + (yo.to(torch::kDouble) * cot[1].to(torch::kDouble)).sum();
    if (used.nx && nx.defined()) l = l + (nx.to(torch::kDouble) * cot[2].to(torch::kDouble)).sum();
    if (used.ny && ny.defined()) l = l + (ny.to(torch::kDouble) * cot[3].to(torch::kDouble)).sum();
    return l;
  };

  auto x1 = leaf(x), o1 = leaf(o), wx1 = leaf(wx), wy1 = leaf(wy);
  auto y1 = shared_input ? x1 : leaf(y);
  const auto s = stream_update(x1, y1, o1, alpha, {on_x, wx1, kEps, centered}, {on_y, wy1, kEps, centered});
  EXPECT_EQ(s.nx.defined(), on_x);
  EXPECT_EQ(s.ny.defined(), on_y);

  const auto c = compute_type(t);
  auto x2 = leaf(x), o2 = leaf(o), wx2 = leaf(wx), wy2 = leaf(wy);
  auto y2 = shared_input ? x2 : leaf(y);
  const auto xo = (x2.to(c) + alpha * o2.to(c)).to(t);
  const auto yo = (y2.to(c) + o2.to(c)).to(t);
  const auto nx = on_x ? reference_norm(xo, wx2, centered) : Tensor();
  const auto ny = on_y ? reference_norm(yo, wy2, centered) : Tensor();

  const auto tol = tolerance(t);
  expect_close(s.x, xo, tol.fwd);
  expect_close(s.y, yo, tol.fwd);
  if (on_x) expect_close(s.nx, nx, tol.fwd);
  if (on_y) expect_close(s.ny, ny, tol.fwd);

  auto l1 = loss(s.x, s.y, s.nx, s.ny), l2 = loss(xo, yo, nx, ny);
  if (!l2.requires_grad()) return;  // the loss reads nothing the update computed
  l1.backward();
  l2.backward();
  auto grad_or_zero = [](const Tensor& p) { return p.grad().defined() ? p.grad() : torch::zeros_like(p); };
  expect_close(grad_or_zero(x1), grad_or_zero(x2), tol.grad);
  if (!shared_input) expect_close(grad_or_zero(y1), grad_or_zero(y2), tol.grad);
  expect_close(grad_or_zero(o1), grad_or_zero(o2), tol.grad);
  if (wx.defined()) expect_close(grad_or_zero(wx1), grad_or_zero(wx2), tol.grad);
  if (wy.defined()) expect_close(grad_or_zero(wy1), grad_or_zero(wy2), tol.grad);
}

// The one-stream update (Pre-Norm's add and next norm) through its autograd node against
//   x' = x + alpha o,  n = norm(x')
// with x' rounded to its dtype before the norm reads it; `used` picks which outputs the loss
// reads (bit 0: x', bit 1: n).
void check_residual_update(torch::Device dev, torch::ScalarType t, std::vector<int64_t> sizes, bool centered,
                           bool weighted, int used) {
  SCOPED_TRACE(std::string(c10::toString(t)) + (centered ? " LayerNorm" : " RMSNorm") +
               (weighted ? " weighted" : "") + " used " + std::to_string(used));
  const int64_t d = sizes.back();
  const double alpha = t == torch::kDouble ? 0.37 : 1.0;
  const auto x = (random(sizes, dev, t, 2) + 1.5).to(t), o = random(sizes, dev, t);
  const auto w = weighted ? random({d}, dev, compute_type(t)).mul(0.5).add(1) : Tensor();
  const auto cot_x = random(sizes, dev, t), cot_n = random(sizes, dev, t);
  auto loss = [&](const Tensor& xo, const Tensor& n) {
    auto l = torch::zeros({}, cot_x.options().dtype(torch::kDouble));
    if (used & 1) l = l + (xo.to(torch::kDouble) * cot_x.to(torch::kDouble)).sum();
    if (used & 2) l = l + (n.to(torch::kDouble) * cot_n.to(torch::kDouble)).sum();
    return l;
  };
  auto x1 = leaf(x), o1 = leaf(o), w1 = leaf(w);
  const auto s = siamese::model::residual_update(x1, o1, alpha, {true, w1, kEps, centered});
  EXPECT_FALSE(s.y.defined());
  const auto c = compute_type(t);
  auto x2 = leaf(x), o2 = leaf(o), w2 = leaf(w);
  const auto xo = (x2.to(c) + alpha * o2.to(c)).to(t);
  const auto n = reference_norm(xo, w2, centered);
  const auto tol = tolerance(t);
  expect_close(s.x, xo, tol.fwd);
  expect_close(s.nx, n, tol.fwd);
  loss(s.x, s.nx).backward();
  loss(xo, n).backward();
  expect_close(x1.grad(), x2.grad(), tol.grad);
  expect_close(o1.grad(), o2.grad(), tol.grad);
  if (weighted && (used & 2)) expect_close(w1.grad(), w2.grad(), tol.grad);
}

void check_every_residual_setting(torch::Device dev, torch::ScalarType t, std::vector<int64_t> sizes) {
  for (bool centered : {false, true})
    for (bool weighted : {false, true})
      for (int used = 1; used < 4; ++used) check_residual_update(dev, t, sizes, centered, weighted, used);
}

void check_every_stream_setting(torch::Device dev, torch::ScalarType t, std::vector<int64_t> sizes) {
  for (bool centered : {false, true})
    for (int norms = 0; norms < 4; ++norms)
      for (bool weighted : {false, true})
        check_stream_update(dev, t, sizes, norms & 1, norms & 2, weighted, {true, true, true, true},
                            /*shared_input=*/false, centered);
}

// Central differences of loss(inputs) along a random direction against the gradient's
// projection on it, in float64.
double directional_mismatch(const std::function<Tensor(const std::vector<Tensor>&)>& loss,
                            std::vector<Tensor> inputs) {
  for (auto& p : inputs) p = leaf(p);
  loss(inputs).backward();
  double analytic = 0;
  std::vector<Tensor> dirs;
  for (auto& p : inputs) {
    dirs.push_back(torch::randn_like(p));
    analytic += (p.grad() * dirs.back()).sum().item<double>();
  }
  const double h = 1e-6;
  auto shifted = [&](double by) {
    torch::NoGradGuard g;
    std::vector<Tensor> moved;
    for (size_t i = 0; i < inputs.size(); ++i) moved.push_back(inputs[i] + by * dirs[i]);
    return loss(moved).item<double>();
  };
  const double numeric = (shifted(h) - shifted(-h)) / (2 * h);
  return std::abs(numeric - analytic) / std::max(1.0, std::abs(analytic));
}

const torch::Device kCpu(torch::kCPU);

}  // namespace

TEST(FusedNorm, RmsNormMatchesCompositeFloat64) {
  torch::manual_seed(1);
  for (bool weighted : {false, true}) {
    check_norm(kCpu, torch::kDouble, {3, 5, 24}, weighted);
    check_norm(kCpu, torch::kDouble, {7, 37}, weighted);   // a row that is no multiple of 8 lanes
    check_norm(kCpu, torch::kDouble, {300, 3}, weighted);  // many row groups
  }
}

TEST(FusedNorm, RmsNormMatchesCompositeFloat32) {
  torch::manual_seed(2);
  for (bool weighted : {false, true}) {
    check_norm(kCpu, torch::kFloat, {4, 6, 64}, weighted);
    check_norm(kCpu, torch::kFloat, {2000, 19}, weighted);
  }
}

TEST(FusedNorm, RmsNormOfBfloat16ComputesInFloat32) {
  torch::manual_seed(3);
  for (bool weighted : {false, true}) check_norm(kCpu, torch::kBFloat16, {16, 48}, weighted);
}

TEST(FusedNorm, RmsNormTakesNonContiguousInput) {
  torch::manual_seed(4);
  const auto x = torch::randn({6, 32}, torch::kDouble).t();  // rows of 6 with stride 32
  const auto w = torch::rand({6}, torch::kDouble);
  EXPECT_LT(rel_err(siamese::kernels::norm_forward(x, w, kEps).y, composite_rms(x, w, kEps)), 1e-14);
}

TEST(FusedNorm, RmsNormFiniteDifferencesFloat64) {
  torch::manual_seed(5);
  const auto cot = torch::randn({5, 11}, torch::kDouble);
  const double err = directional_mismatch(
      [&](const std::vector<Tensor>& in) {
        Norm norm(NormKind::RMS, 11, kEps, true, false);
        norm->to(torch::kDouble);
        norm->weight = in[1];  // the input under test, not the module's own parameter
        return (norm(in[0]) * cot).sum();
      },
      {torch::randn({5, 11}, torch::kDouble), torch::rand({11}, torch::kDouble) + 0.5});
  EXPECT_LT(err, 1e-8);
}

TEST(FusedNorm, UnsupportedDtypeIsRejectedAndTheNormModuleFallsBackToFloat32) {
  const auto x = torch::randn({3, 8}).to(torch::kHalf);
  EXPECT_FALSE(siamese::kernels::norm_supports(x));
  EXPECT_THROW(siamese::kernels::norm_forward(x, {}, kEps), c10::Error);
  Norm norm(NormKind::RMS, 8, kEps, true, false);
  const auto y = norm(x);
  EXPECT_EQ(y.scalar_type(), torch::kHalf);
  EXPECT_LT(rel_err(y, composite_rms(x.to(torch::kFloat), norm->weight, kEps)), 1e-3);
}

TEST(FusedNorm, LayerNormMatchesAtenInEveryDtype) {
  torch::manual_seed(13);
  for (bool weighted : {false, true}) {
    check_norm(kCpu, torch::kDouble, {3, 5, 24}, weighted, /*centered=*/true);
    check_norm(kCpu, torch::kDouble, {300, 37}, weighted, true);
    check_norm(kCpu, torch::kFloat, {4, 6, 64}, weighted, true);
    check_norm(kCpu, torch::kFloat, {2000, 19}, weighted, true);
    check_norm(kCpu, torch::kBFloat16, {16, 48}, weighted, true);
    check_norm(kCpu, torch::kBFloat16, {16, 48}, weighted, true, /*float_out=*/true);
  }
}

TEST(FusedNorm, StreamUpdateMatchesCompositeFloat64EveryNormSetting) {
  torch::manual_seed(6);
  check_every_stream_setting(kCpu, torch::kDouble, {2, 3, 24});
  check_every_stream_setting(kCpu, torch::kDouble, {150, 13});
}

TEST(FusedNorm, StreamUpdateMatchesCompositeFloat32EveryNormSetting) {
  torch::manual_seed(7);
  check_every_stream_setting(kCpu, torch::kFloat, {4, 5, 64});
}

TEST(FusedNorm, StreamUpdateOfBfloat16ComputesInFloat32) {
  torch::manual_seed(8);
  check_every_stream_setting(kCpu, torch::kBFloat16, {8, 40});
}

// Outputs the loss does not read send no gradient (undefined in the backward).
TEST(FusedNorm, StreamUpdateWithMissingIncomingGradients) {
  torch::manual_seed(9);
  for (bool centered : {false, true})
    for (int used = 1; used < 16; ++used)
      check_stream_update(kCpu, torch::kDouble, {3, 16}, true, true, true,
                          {(used & 1) != 0, (used & 2) != 0, (used & 4) != 0, (used & 8) != 0}, false,
                          centered);
  // The raw backward with nothing arriving: all gradients zero, weights' too.
  const auto x = torch::randn({3, 16}, torch::kDouble), w = torch::rand({16}, torch::kDouble);
  const siamese::kernels::StreamNormSpec on{true, w, kEps};
  const auto fwd = siamese::kernels::stream_update_forward(x, x, x, 0.5, on, on);
  const auto g = siamese::kernels::stream_update_backward({}, {}, {}, {}, fwd, 0.5, on, on);
  for (const auto& t : {g.dx, g.dy, g.d_o, g.dw_x, g.dw_y}) EXPECT_EQ(t.abs().max().item<double>(), 0);
}

// SiameseNorm's streams both start at the embeddings: x and y are one tensor.
TEST(FusedNorm, StreamUpdateWithOneTensorAsBothStreams) {
  torch::manual_seed(10);
  check_stream_update(kCpu, torch::kDouble, {4, 24}, true, true, true, {true, true, true, true},
                      /*shared_input=*/true);
}

TEST(FusedNorm, StreamUpdateFiniteDifferencesFloat64) {
  torch::manual_seed(11);
  const int64_t d = 9;
  std::vector<Tensor> cot;
  for (int i = 0; i < 4; ++i) cot.push_back(torch::randn({4, d}, torch::kDouble));
  for (bool centered : {false, true}) {
    SCOPED_TRACE(centered ? "LayerNorm" : "RMSNorm");
    const double err = directional_mismatch(
        [&](const std::vector<Tensor>& in) {
          const auto s = stream_update(in[0], in[1], in[2], 0.6, {true, in[3], kEps, centered},
                                       {true, in[4], kEps, centered});
          return (s.x * cot[0]).sum() + (s.y * cot[1]).sum() + (s.nx * cot[2]).sum() + (s.ny * cot[3]).sum();
        },
        {torch::randn({4, d}, torch::kDouble) + 1, torch::randn({4, d}, torch::kDouble),
         torch::randn({4, d}, torch::kDouble), torch::rand({d}, torch::kDouble) + 0.5,
         torch::rand({d}, torch::kDouble) + 0.5});
    EXPECT_LT(err, 1e-8);
  }
}

TEST(FusedNorm, ResidualUpdateMatchesCompositeInEveryDtype) {
  torch::manual_seed(14);
  check_every_residual_setting(kCpu, torch::kDouble, {2, 3, 24});
  check_every_residual_setting(kCpu, torch::kDouble, {150, 13});
  check_every_residual_setting(kCpu, torch::kFloat, {4, 5, 64});
  check_every_residual_setting(kCpu, torch::kBFloat16, {8, 40});
}

TEST(FusedNorm, ResidualUpdateFiniteDifferencesFloat64) {
  torch::manual_seed(15);
  const int64_t d = 9;
  const auto cot_x = torch::randn({4, d}, torch::kDouble), cot_n = torch::randn({4, d}, torch::kDouble);
  for (bool centered : {false, true}) {
    SCOPED_TRACE(centered ? "LayerNorm" : "RMSNorm");
    const double err = directional_mismatch(
        [&](const std::vector<Tensor>& in) {
          const auto s = siamese::model::residual_update(in[0], in[1], 0.6, {true, in[2], kEps, centered});
          return (s.x * cot_x).sum() + (s.nx * cot_n).sum();
        },
        {torch::randn({4, d}, torch::kDouble) + 1, torch::randn({4, d}, torch::kDouble),
         torch::rand({d}, torch::kDouble) + 0.5});
    EXPECT_LT(err, 1e-8);
  }
}

TEST(FusedNorm, WeightGradientIsReproducible) {
  torch::manual_seed(12);
  const auto x = torch::randn({1000, 64}), dy = torch::randn({1000, 64}), w = torch::rand({64});
  const auto r = siamese::kernels::norm_forward(x, w, kEps).r;
  const auto a = siamese::kernels::norm_backward(dy, x, r, {}, w),
             b = siamese::kernels::norm_backward(dy, x, r, {}, w);
  EXPECT_TRUE(torch::equal(a.dw, b.dw));
  EXPECT_TRUE(torch::equal(a.dx, b.dx));
}

// ---- On a GPU: the CUDA kernels against the composite on the same device.

TEST(GpuFusedNorm, NormsMatchComposite) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: the CUDA kernels need a GPU";
  torch::manual_seed(21);
  const torch::Device gpu(torch::kCUDA);
  for (auto t : {torch::kFloat, torch::kBFloat16, torch::kHalf})
    for (bool centered : {false, true})
      for (int outs = 0; outs < (centered && t != torch::kFloat ? 2 : 1); ++outs)
        for (bool weighted : {false, true}) {
          const bool float_out = outs == 1;  // a half LayerNorm's float32 output too
          check_norm(gpu, t, {4, 6, 64}, weighted, centered, float_out);
          check_norm(gpu, t, {3000, 37}, weighted, centered,
                     float_out);  // several rows per block, a ragged warp
          check_norm(gpu, t, {64, 8192}, weighted, centered, float_out);  // the widest block
        }
}

TEST(GpuFusedNorm, StreamUpdateMatchesComposite) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: the CUDA kernels need a GPU";
  torch::manual_seed(22);
  const torch::Device gpu(torch::kCUDA);
  for (auto t : {torch::kFloat, torch::kBFloat16}) {
    check_every_stream_setting(gpu, t, {2, 8, 256});
    check_every_stream_setting(gpu, t, {2500, 100});
  }
  for (bool centered : {false, true})
    for (int used = 1; used < 16; ++used)
      check_stream_update(gpu, torch::kFloat, {40, 96}, true, true, true,
                          {(used & 1) != 0, (used & 2) != 0, (used & 4) != 0, (used & 8) != 0}, false,
                          centered);
  for (auto t : {torch::kFloat, torch::kBFloat16}) {
    check_every_residual_setting(gpu, t, {2, 8, 256});
    check_every_residual_setting(gpu, t, {2500, 100});
  }
}

TEST(GpuFusedNorm, CudaMatchesCpuAndIsReproducible) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: the CUDA kernels need a GPU";
  torch::manual_seed(23);
  const auto x = torch::randn({5000, 512}), dy = torch::randn({5000, 512}), w = torch::rand({512});
  const auto cpu = siamese::kernels::norm_forward(x, w, kEps);
  const auto cpu_g = siamese::kernels::norm_backward(dy, x, cpu.r, {}, w);
  const auto xg = x.cuda(), dyg = dy.cuda(), wg = w.cuda();
  const auto gpu = siamese::kernels::norm_forward(xg, wg, kEps);
  const auto gpu_g = siamese::kernels::norm_backward(dyg, xg, gpu.r, {}, wg);
  EXPECT_LT(rel_err(gpu.y, cpu.y), 2e-6);
  EXPECT_LT(rel_err(gpu_g.dx, cpu_g.dx), 1e-5);
  EXPECT_LT(rel_err(gpu_g.dw, cpu_g.dw), 1e-5);
  EXPECT_TRUE(torch::equal(gpu_g.dw, siamese::kernels::norm_backward(dyg, xg, gpu.r, {}, wg).dw));
}
