#include "siamese/kernels/op_table.h"

#include <ATen/cuda/CUDAContext.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <functional>
#include <limits>
#include <utility>

#include "siamese/kernels/cross_entropy.h"
#include "siamese/kernels/fused_norm.h"
#include "siamese/kernels/qkv_heads.h"
#include "siamese/kernels/rope.h"
#include "siamese/kernels/swiglu.h"

namespace siamese::kernels {
namespace {

using torch::Tensor;

constexpr auto kF32 = torch::kFloat;
constexpr auto kBf16 = torch::kBFloat16;
constexpr auto kF64 = torch::kDouble;
constexpr auto kF16 = torch::kHalf;

constexpr std::array<Op, 13> kOps = {Op::RmsNorm,
                                     Op::LayerNorm,
                                     Op::LayerNormFloatOut,
                                     Op::StreamUpdate,
                                     Op::StreamUpdateLayerNorm,
                                     Op::ResidualUpdate,
                                     Op::ResidualUpdateLayerNorm,
                                     Op::CrossEntropy,
                                     Op::Swiglu,
                                     Op::Rope,
                                     Op::QkvHeadsRms,
                                     Op::QkvHeadsLayerNorm,
                                     Op::QkvHeadsRopeOnly};

double epsilon(torch::ScalarType t) {
  if (t == kF64) return std::numeric_limits<double>::epsilon();
  if (t == kBf16) return std::numeric_limits<c10::BFloat16>::epsilon();
  if (t == kF16) return std::numeric_limits<c10::Half>::epsilon();
  return std::numeric_limits<float>::epsilon();
}

// The tolerance of one output. Each output element is a few element-wise steps around at most
// one sum of n terms, computed in the accumulation type (float for float32 and bfloat16, double
// for float64; RoPE's float32 tables make it float always), then stored once in the output's
// dtype. With u = eps / 2 the unit roundoff:
// - recursive summation of n terms errs by at most (n - 1) u_acc relative to the sum of the
//   terms' magnitudes (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., 4.2);
//   the kernels' lanes and row groups split the sum, which only lowers that bound;
// - each element-wise step (a product, an rsqrt, the CPU exp to 2 ulp) adds at most a few
//   u_acc: 8 eps_acc = 16 u_acc covers the longest chain (sigmoid, silu' and three products);
// - storing the output costs u_out, and re-reading a stored intermediate (the stream update's
//   x' and y', which its norms read as stored) about as much again.
// The float64 reference errs by the same bound in float64 rows and by 2^-29 of it in the others,
// so eps_acc = 2 u_acc per term covers both sides. With a factor 2 on the storage term:
//   tol = 4 eps_out + (n + 8) eps_acc,
// measured as max |got - want| / max |want|. Random inputs keep the outputs the same size as
// the terms they sum (no cancellation that would make the relative bound loose).
double tolerance(torch::ScalarType out, torch::ScalarType acc, int64_t n) {
  return 4 * epsilon(out) + static_cast<double>(n + 8) * epsilon(acc);
}

// One output of a row's op: what the kernel returned, the reference, the dtype the op stores it
// in, the accumulation type and the longest sum behind one element.
struct Output {
  std::string name;
  Tensor got, want;
  torch::ScalarType stored, acc;
  int64_t n;
};

torch::ScalarType acc_of(torch::ScalarType t) { return t == kF64 ? kF64 : kF32; }

// Normal values times scale plus shift, stored in t, on the CPU.
Tensor random(at::IntArrayRef sizes, torch::ScalarType t, double scale = 1, double shift = 0) {
  return (torch::randn(sizes, torch::kDouble) * scale + shift).to(t);
}

Tensor f64(const Tensor& t) { return t.detach().to(torch::kCPU, torch::kDouble); }
Tensor leaf64(const Tensor& t) { return f64(t).requires_grad_(); }

constexpr double kEps = 1e-5;

// RMSNorm, or LayerNorm without bias when centered, written out.
Tensor reference_norm(const Tensor& x, const Tensor& w, bool centered) {
  const auto c = centered ? x - x.mean(-1, true) : x;
  return c * torch::rsqrt(c.pow(2).mean(-1, true) + kEps) * w;
}

// 300 rows of 200: rows no multiple of the CPU's 8 lanes or a warp, several rows per CPU row
// group; inputs off zero so that a LayerNorm's centering matters.
const std::vector<int64_t> kRows{3, 100, 200};
constexpr int64_t kRowCount = 300, kWidth = 200;

std::vector<Output> norm_outputs(torch::ScalarType t, torch::Device dev, bool centered, bool float_out) {
  const auto acc = acc_of(t), out_t = float_out ? kF32 : t;
  const auto x = random(kRows, t, 2, 1.5), w = random({kWidth}, acc, 0.5, 1), dy = random(kRows, out_t);
  const auto out = norm_forward(x.to(dev), w.to(dev), kEps, centered, float_out);
  const auto g = norm_backward(dy.to(dev), x.to(dev), out.r, out.mu, w.to(dev));
  auto x64 = leaf64(x), w64 = leaf64(w);
  const auto y64 = reference_norm(x64, w64, centered);
  (y64 * f64(dy)).sum().backward();
  return {{"y", out.y, y64, out_t, acc, kWidth},
          {"dx", g.dx, x64.grad(), t, acc, kWidth},
          {"dw", g.dw, w64.grad(), acc, acc, kRowCount}};
}

// x' = x + alpha o, y' = y + o, nx = norm(x'), ny = norm(y'), both norms weighted, gradients
// arriving at all four outputs. The reference's streams are rounded to t before its norms read
// them, as the kernel's are.
std::vector<Output> stream_update_outputs(torch::ScalarType t, torch::Device dev, bool centered) {
  const auto acc = acc_of(t);
  const double alpha = 0.37;
  const auto x = random(kRows, t, 2, 1.5), y = random(kRows, t, 2, -0.75), o = random(kRows, t);
  const auto wx = random({kWidth}, acc, 0.5, 1), wy = random({kWidth}, acc, 0.5, 1);
  std::vector<Tensor> cot;  // of x', y', nx, ny
  for (int i = 0; i < 4; ++i) cot.push_back(random(kRows, t));
  const StreamNormSpec norm_x{true, wx.to(dev), kEps, centered}, norm_y{true, wy.to(dev), kEps, centered};
  const auto fwd = stream_update_forward(x.to(dev), y.to(dev), o.to(dev), alpha, norm_x, norm_y);
  const auto g = stream_update_backward(cot[0].to(dev), cot[1].to(dev), cot[2].to(dev), cot[3].to(dev), fwd,
                                        alpha, norm_x, norm_y);
  auto x64 = leaf64(x), y64 = leaf64(y), o64 = leaf64(o), wx64 = leaf64(wx), wy64 = leaf64(wy);
  const auto xo = (x64 + alpha * o64).to(t).to(kF64), yo = (y64 + o64).to(t).to(kF64);
  const auto nx = reference_norm(xo, wx64, centered), ny = reference_norm(yo, wy64, centered);
  ((xo * f64(cot[0])).sum() + (yo * f64(cot[1])).sum() + (nx * f64(cot[2])).sum() + (ny * f64(cot[3])).sum())
      .backward();
  return {{"x'", fwd.x, xo, t, acc, 0},
          {"y'", fwd.y, yo, t, acc, 0},
          {"nx", fwd.nx, nx, t, acc, kWidth},
          {"ny", fwd.ny, ny, t, acc, kWidth},
          {"dx", g.dx, x64.grad(), t, acc, kWidth},
          {"dy", g.dy, y64.grad(), t, acc, kWidth},
          {"do", g.d_o, o64.grad(), t, acc, kWidth},
          {"dw_x", g.dw_x, wx64.grad(), acc, acc, kRowCount},
          {"dw_y", g.dw_y, wy64.grad(), acc, acc, kRowCount}};
}

// The softmax statistics and the cross-entropy's gradient with per-row scales s_i and target
// gradient g: the gradient of sum_i s_i logsumexp(x_i) - g sum_i x_i[target_i]. Rows of 1037
// leave a tail after the CPU's 16 lanes and take the CUDA kernels' single elements; rows of
// 1040 take their 16-byte packs. Outputs at -inf logits are compared as their zeros.
std::vector<Output> cross_entropy_outputs(torch::ScalarType t, torch::Device dev) {
  std::vector<Output> outs;
  for (const int64_t vocab : {1037, 1040}) {
    const int64_t rows = 37;
    const float target_grad = 0.8f;
    // -inf logits (a float16 logit past its range becomes one): a whole 16-byte pack of them
    // in row 0, a single one in row 1; neither row's target is one.
    auto x = random({rows, vocab}, t, 3);
    x.narrow(1, 0, 9)[0].fill_(-std::numeric_limits<double>::infinity());
    x[1][3] = -std::numeric_limits<double>::infinity();
    auto targets = torch::randint(vocab, {rows}, torch::kLong);
    targets[0] = vocab - 1;
    targets[1] = vocab - 2;
    const auto scale = torch::rand({rows, 1}, kF32) + 0.5;
    const auto stats = log_softmax_stats(x.to(dev));
    const auto grad = cross_entropy_grad(x.to(dev), stats, scale.to(dev), targets.to(dev),
                                         torch::full({}, target_grad).to(dev));
    auto x64 = leaf64(x);
    const auto want_max = std::get<0>(x64.max(1));
    const auto want_log_sum = torch::logsumexp(x64, 1) - want_max;
    ((f64(scale).squeeze(1) * torch::logsumexp(x64, 1)).sum() -
     target_grad * x64.gather(1, targets.unsqueeze(1)).sum())
        .backward();
    const auto width = ", vocab " + std::to_string(vocab);
    outs.push_back({"max" + width, stats[0].squeeze(1), want_max, kF32, kF32, 0});
    outs.push_back({"log_sum" + width, stats[1].squeeze(1), want_log_sum, kF32, kF32, vocab});
    outs.push_back({"dx" + width, grad, x64.grad(), t, kF32, vocab});
  }
  return outs;
}

// h = [a | b] -> a silu(b), rows of 2 * 75: a tail after every CPU vector width, and single
// elements on CUDA, whose 16-byte packs need n a multiple of 8 (bfloat16) or 4 (float32). Rows
// of 2 * 64 take the packs.
std::vector<Output> swiglu_outputs(torch::ScalarType t, torch::Device dev) {
  std::vector<Output> outs;
  for (const int64_t n : {75, 64}) {
    const int64_t rows = 150;
    const auto h = random({rows, 2 * n}, t, 4), g = random({rows, n}, t);
    const auto out = swiglu(h.to(dev)), dh = swiglu_backward(h.to(dev), g.to(dev));
    auto h64 = leaf64(h);
    const auto y64 = h64.narrow(1, 0, n) * torch::silu(h64.narrow(1, n, n));
    (y64 * f64(g)).sum().backward();
    const auto width = std::to_string(n);
    outs.push_back({"out, n " + width, out, y64, t, kF32, 0});
    outs.push_back({"dh, n " + width, dh, h64.grad(), t, kF32, 0});
  }
  return outs;
}

// q as attention hands it over, a transposed view [B, H, T, hd] of [B, T, H, hd], rotated by
// float32 tables against the textbook t cos + rotate_half(t) sin; the backward is the rotation
// by the negative angles.
std::vector<Output> rope_outputs(torch::ScalarType t, torch::Device dev) {
  const int64_t B = 2, T = 7, H = 3, hd = 16;
  const auto inv_freq = 1.0 / torch::pow(10000.0, torch::arange(0, hd, 2, torch::kDouble) / double(hd));
  const auto angles = torch::outer(torch::arange(T, torch::kDouble), inv_freq).to(kF32);
  const auto sin = angles.sin(), cos = angles.cos();
  const auto q = random({B, T, H, hd}, t).transpose(1, 2), dy = random({B, H, T, hd}, t);
  const auto y = rope_rotate(q.to(dev), sin.to(dev), cos.to(dev), 1.0f);
  const auto dq = rope_rotate(dy.to(dev), sin.to(dev), cos.to(dev), -1.0f);
  auto q64 = leaf64(q);
  const auto s = torch::cat({f64(sin), f64(sin)}, -1), c = torch::cat({f64(cos), f64(cos)}, -1);
  const auto rotated_half = torch::cat({-q64.narrow(-1, hd / 2, hd / 2), q64.narrow(-1, 0, hd / 2)}, -1);
  const auto y64 = q64 * c + rotated_half * s;
  (y64 * f64(dy)).sum().backward();
  return {{"y", y, y64, t, kF32, 0}, {"dq", dq, q64.grad(), t, kF32, 0}};
}

// The attention's head preparation from qkv [B, T, (H + 2 Hkv) hd]: q's and k's head rows
// normalized without weights (unless rope_only) and rotated, v's normalized, against the
// textbook norm and rotate-half in float64. Grouped-query heads (3 against 1); the gradients
// arrive as flash attention's do, transposed views of [B, T, heads, hd].
std::vector<Output> qkv_heads_outputs(torch::ScalarType t, torch::Device dev, bool norms, bool centered,
                                      int64_t hd) {
  const int64_t B = 2, T = 5, H = 3, Hkv = 1, h = hd / 2;
  QkvHeadsSpec spec;
  spec.heads = H;
  spec.kv_heads = Hkv;
  spec.head_dim = hd;
  spec.norm = {norms, norms, norms};
  spec.centered = centered;
  spec.eps = kEps;
  spec.rope = true;
  const auto inv_freq = 1.0 / torch::pow(10000.0, torch::arange(0, hd, 2, torch::kDouble) / double(hd));
  const auto angles = torch::outer(torch::arange(T, torch::kDouble), inv_freq).to(kF32);
  const auto sin = angles.sin(), cos = angles.cos();
  const auto qkv = random({B, T, (H + 2 * Hkv) * hd}, t, 2, 0.5);
  std::array<Tensor, 3> grads;
  for (int p = 0; p < 3; ++p) grads[p] = random({B, T, p == 0 ? H : Hkv, hd}, t).transpose(1, 2);
  const auto out = qkv_heads(qkv.to(dev), spec, sin.to(dev), cos.to(dev));
  const auto dqkv = qkv_heads_backward(qkv.to(dev), spec, sin.to(dev), cos.to(dev),
                                       {grads[0].to(dev), grads[1].to(dev), grads[2].to(dev)});
  auto qkv64 = leaf64(qkv);
  const auto parts = qkv64.split({H * hd, Hkv * hd, Hkv * hd}, -1);
  const auto s = torch::cat({f64(sin), f64(sin)}, -1), c = torch::cat({f64(cos), f64(cos)}, -1);
  Tensor loss = torch::zeros({}, torch::kDouble);
  std::vector<Output> outs;
  const std::string width = ", head_dim " + std::to_string(hd);
  const char* names[3] = {"q", "k", "v"};
  for (int p = 0; p < 3; ++p) {
    auto x = parts[p].reshape({B, T, p == 0 ? H : Hkv, hd}).transpose(1, 2);
    if (norms) {
      const auto centred = centered ? x - x.mean(-1, true) : x;
      x = centred * torch::rsqrt(centred.pow(2).mean(-1, true) + kEps);
    }
    if (p < 2) x = x * c + torch::cat({-x.narrow(-1, h, h), x.narrow(-1, 0, h)}, -1) * s;
    loss = loss + (x * f64(grads[p])).sum();
    outs.push_back({names[p] + width, out[p], x.detach(), t, kF32, norms ? hd : 0});
  }
  loss.backward();
  outs.push_back({"dqkv" + width, dqkv, qkv64.grad(), t, kF32, norms ? hd : 0});
  return outs;
}

// x' = x + alpha o and n = norm(x'), weighted, gradients arriving at both outputs; x' rounded
// to t before the reference's norm reads it, as the kernel's is.
std::vector<Output> residual_update_outputs(torch::ScalarType t, torch::Device dev, bool centered) {
  const auto acc = acc_of(t);
  const double alpha = 0.37;
  const auto x = random(kRows, t, 2, 1.5), o = random(kRows, t);
  const auto w = random({kWidth}, acc, 0.5, 1);
  const auto cot_x = random(kRows, t), cot_n = random(kRows, t);
  const StreamNormSpec norm{true, w.to(dev), kEps, centered};
  const auto fwd = stream_update_forward(x.to(dev), {}, o.to(dev), alpha, norm, {});
  const auto g = stream_update_backward(cot_x.to(dev), {}, cot_n.to(dev), {}, fwd, alpha, norm, {});
  auto x64 = leaf64(x), o64 = leaf64(o), w64 = leaf64(w);
  const auto xo = (x64 + alpha * o64).to(t).to(kF64);
  const auto n = reference_norm(xo, w64, centered);
  ((xo * f64(cot_x)).sum() + (n * f64(cot_n)).sum()).backward();
  return {{"x'", fwd.x, xo, t, acc, 0},
          {"n", fwd.nx, n, t, acc, kWidth},
          {"dx", g.dx, x64.grad(), t, acc, kWidth},
          {"do", g.d_o, o64.grad(), t, acc, kWidth},
          {"dw", g.dw_x, w64.grad(), acc, acc, kRowCount}};
}

// Every head width the CUDA kernels take: 1, 2, 4 and 8 values a lane.
std::vector<Output> qkv_heads_outputs(torch::ScalarType t, torch::Device dev, bool norms, bool centered) {
  std::vector<Output> outs;
  for (const int64_t hd : {32, 64, 128, 256})
    for (auto& o : qkv_heads_outputs(t, dev, norms, centered, hd)) outs.push_back(std::move(o));
  return outs;
}

std::vector<Output> outputs(const OpRow& row) {
  const torch::Device dev(row.backend);
  switch (row.op) {
    case Op::RmsNorm:
      return norm_outputs(row.dtype, dev, false, false);
    case Op::LayerNorm:
      return norm_outputs(row.dtype, dev, true, false);
    case Op::LayerNormFloatOut:
      return norm_outputs(row.dtype, dev, true, true);
    case Op::StreamUpdate:
      return stream_update_outputs(row.dtype, dev, false);
    case Op::StreamUpdateLayerNorm:
      return stream_update_outputs(row.dtype, dev, true);
    case Op::ResidualUpdate:
      return residual_update_outputs(row.dtype, dev, false);
    case Op::ResidualUpdateLayerNorm:
      return residual_update_outputs(row.dtype, dev, true);
    case Op::CrossEntropy:
      return cross_entropy_outputs(row.dtype, dev);
    case Op::Swiglu:
      return swiglu_outputs(row.dtype, dev);
    case Op::Rope:
      return rope_outputs(row.dtype, dev);
    case Op::QkvHeadsRms:
      return qkv_heads_outputs(row.dtype, dev, true, false);
    case Op::QkvHeadsLayerNorm:
      return qkv_heads_outputs(row.dtype, dev, true, true);
    case Op::QkvHeadsRopeOnly:
      return qkv_heads_outputs(row.dtype, dev, false, false);
  }
  return {};
}

// ---- timing ------------------------------------------------------------------------

// The kernel's forward and the same op of ATen ops, on inputs of a training step's size in the
// row's dtype on its device.
using Pair = std::pair<std::function<void()>, std::function<void()>>;

Tensor on(at::IntArrayRef sizes, const OpRow& row, torch::ScalarType t) {
  return torch::randn(sizes, torch::dtype(t).device(row.backend));
}

Tensor aten_norm(const Tensor& x, const Tensor& w, bool centered, torch::ScalarType out) {
  const auto wide = x.to(acc_of(x.scalar_type()));
  return (centered ? torch::layer_norm(wide, {wide.size(-1)}, w, {}, kEps)
                   : wide * torch::rsqrt(wide.pow(2).mean(-1, true) + kEps) * w)
      .to(out);
}

Pair timed_pair(const OpRow& row) {
  const auto t = row.dtype, acc = acc_of(t);
  const bool centered = row.op == Op::LayerNorm || row.op == Op::LayerNormFloatOut ||
                        row.op == Op::StreamUpdateLayerNorm || row.op == Op::ResidualUpdateLayerNorm ||
                        row.op == Op::QkvHeadsLayerNorm;
  switch (row.op) {
    case Op::RmsNorm:
    case Op::LayerNorm:
    case Op::LayerNormFloatOut: {
      const bool float_out = row.op == Op::LayerNormFloatOut;
      const auto x = on({8192, 2048}, row, t), w = on({2048}, row, acc);
      const auto out = float_out ? kF32 : t;
      return {[=] { norm_forward(x, w, kEps, centered, float_out); },
              [=] { aten_norm(x, w, centered, out); }};
    }
    case Op::StreamUpdate:
    case Op::StreamUpdateLayerNorm: {
      const auto x = on({8192, 2048}, row, t), y = on({8192, 2048}, row, t), o = on({8192, 2048}, row, t);
      const auto w = on({2048}, row, acc);
      const StreamNormSpec norm{true, w, kEps, centered};
      return {[=] { stream_update_forward(x, y, o, 0.5, norm, norm); },
              [=] {
                const auto xo = x + 0.5 * o, yo = y + o;
                aten_norm(xo, w, centered, t);
                aten_norm(yo, w, centered, t);
              }};
    }
    case Op::ResidualUpdate:
    case Op::ResidualUpdateLayerNorm: {
      const auto x = on({8192, 2048}, row, t), o = on({8192, 2048}, row, t);
      const auto w = on({2048}, row, acc);
      const StreamNormSpec norm{true, w, kEps, centered};
      return {[=] { stream_update_forward(x, {}, o, 1.0, norm, {}); },
              [=] { aten_norm(x + o, w, centered, t); }};
    }
    case Op::CrossEntropy: {
      const auto x = on({2048, 50304}, row, t);
      return {[=] { log_softmax_stats(x); },
              [=] {
                const auto wide = x.to(kF32);
                const auto max = std::get<0>(wide.max(1, true));
                (wide - max).exp().sum(1, true).log();
              }};
    }
    case Op::Swiglu: {
      const auto h = on({8192, 2 * 5632}, row, t);
      return {[=] { swiglu(h); },
              [=] {
                const auto parts = h.chunk(2, -1);
                parts[0] * torch::silu(parts[1]);
              }};
    }
    case Op::Rope: {
      const int64_t hd = 128, T = 2048;
      const auto q = on({4, T, 16, hd}, row, t).transpose(1, 2);
      const auto s = on({T, hd / 2}, row, kF32), c = on({T, hd / 2}, row, kF32);
      return {[=] { rope_rotate(q, s, c, 1.0f); },
              [=] {
                const auto s2 = torch::cat({s, s}, -1), c2 = torch::cat({c, c}, -1);
                const auto half = q.narrow(-1, hd / 2, hd / 2), first = q.narrow(-1, 0, hd / 2);
                q* c2 + torch::cat({-half, first}, -1) * s2;
              }};
    }
    case Op::QkvHeadsRms:
    case Op::QkvHeadsLayerNorm:
    case Op::QkvHeadsRopeOnly: {
      const int64_t B = 4, T = 2048, H = 16, hd = 128;
      const bool norms = row.op != Op::QkvHeadsRopeOnly;
      QkvHeadsSpec spec;
      spec.heads = spec.kv_heads = H;
      spec.head_dim = hd;
      spec.norm = {norms, norms, norms};
      spec.centered = centered;
      spec.eps = kEps;
      spec.rope = true;
      const auto qkv = on({B, T, 3 * H * hd}, row, t);
      const auto s = on({T, hd / 2}, row, kF32), c = on({T, hd / 2}, row, kF32);
      return {
          [=] { qkv_heads(qkv, spec, s, c); },
          [=] {
            const auto s2 = torch::cat({s, s}, -1), c2 = torch::cat({c, c}, -1);
            for (const auto& part : qkv.chunk(3, -1)) {
              auto x = part.reshape({B, T, H, hd}).transpose(1, 2).to(kF32);
              if (norms) {
                if (centered) x = x - x.mean(-1, true);
                x = x * torch::rsqrt(x.pow(2).mean(-1, true) + kEps);
              }
              (x * c2 + torch::cat({-x.narrow(-1, hd / 2, hd / 2), x.narrow(-1, 0, hd / 2)}, -1) * s2).to(t);
            }
          }};
    }
  }
  return {};
}

// The median of 9 timings of `fn`, each over enough calls to take about 20 ms.
double seconds_per_call(const std::function<void()>& fn, torch::DeviceType backend) {
  const auto sync = [&] {
    if (backend == torch::kCUDA) at::cuda::getCurrentCUDAStream().synchronize();
  };
  const auto clock = [&](int calls) {
    sync();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) fn();
    sync();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  clock(2);  // warm-up: allocation, kernel selection
  const int calls = std::clamp(int(0.02 / std::max(clock(1), 1e-6)), 1, 1000);
  std::vector<double> per_call;
  for (int i = 0; i < 9; ++i) per_call.push_back(clock(calls) / calls);
  std::sort(per_call.begin(), per_call.end());
  return per_call[per_call.size() / 2];
}

}  // namespace

const char* op_name(Op op) {
  switch (op) {
    case Op::RmsNorm:
      return "rms_norm";
    case Op::LayerNorm:
      return "layer_norm";
    case Op::LayerNormFloatOut:
      return "layer_norm_float_out";
    case Op::StreamUpdate:
      return "stream_update";
    case Op::StreamUpdateLayerNorm:
      return "stream_update_layer_norm";
    case Op::ResidualUpdate:
      return "residual_update";
    case Op::ResidualUpdateLayerNorm:
      return "residual_update_layer_norm";
    case Op::CrossEntropy:
      return "cross_entropy";
    case Op::Swiglu:
      return "swiglu";
    case Op::Rope:
      return "rope";
    case Op::QkvHeadsRms:
      return "qkv_heads_rms";
    case Op::QkvHeadsLayerNorm:
      return "qkv_heads_layer_norm";
    case Op::QkvHeadsRopeOnly:
      return "qkv_heads_rope_only";
  }
  return "unknown";
}

const char* dtype_name(torch::ScalarType t) {
  return t == kF64 ? "float64" : t == kBf16 ? "bfloat16" : t == kF16 ? "float16" : "float32";
}

Family family_of(Op op) {
  switch (op) {
    case Op::RmsNorm:
    case Op::LayerNorm:
    case Op::LayerNormFloatOut:
    case Op::StreamUpdate:
    case Op::StreamUpdateLayerNorm:
    case Op::ResidualUpdate:
    case Op::ResidualUpdateLayerNorm:
      return Family::Norm;
    case Op::CrossEntropy:
      return Family::CrossEntropy;
    case Op::Swiglu:
      return Family::Swiglu;
    case Op::Rope:
      return Family::Rope;
    case Op::QkvHeadsRms:
    case Op::QkvHeadsLayerNorm:
    case Op::QkvHeadsRopeOnly:
      return Family::QkvHeads;
  }
  return Family::Norm;
}

std::vector<OpRow> op_table(torch::DeviceType backend) {
  std::vector<OpRow> rows;
  for (Op op : kOps)
    for (auto t : {kF32, kBf16, kF16, kF64}) {
      // A float32 output of a float32 input is LayerNorm itself.
      if (op == Op::LayerNormFloatOut && c10::elementSize(t) >= 4) continue;
      if (has_kernel(family_of(op), t, backend)) rows.push_back({op, t, backend});
    }
  return rows;
}

bool RowCheck::pass() const {
  return raised.empty() && !outputs.empty() &&
         std::all_of(outputs.begin(), outputs.end(), [](const auto& o) { return o.pass(); });
}

const OutputCheck& RowCheck::worst() const {
  static const OutputCheck none{"-", 0, 0, true, true};
  if (outputs.empty()) return none;
  return *std::max_element(outputs.begin(), outputs.end(), [](const auto& a, const auto& b) {
    return !a.pass() < !b.pass() || (a.pass() == b.pass() && a.error / a.tolerance < b.error / b.tolerance);
  });
}

namespace {

void check_outputs(RowCheck& check, bool timed) {
  const OpRow& row = check.row;
  for (const auto& o : outputs(row)) {
    OutputCheck c;
    c.name = o.name;
    c.tolerance = tolerance(o.stored, o.acc, o.n);
    c.dtype_ok = o.got.defined() && o.got.scalar_type() == o.stored;
    c.shape_ok = o.got.defined() && o.got.sizes() == o.want.sizes();
    if (c.shape_ok) {
      const auto want = o.want.detach();
      const double scale = want.abs().max().item<double>();
      c.error = scale > 0 ? (f64(o.got) - want).abs().max().item<double>() / scale
                          : std::numeric_limits<double>::infinity();
    }
    check.outputs.push_back(std::move(c));
  }
  if (timed) {
    torch::NoGradGuard no_grad;
    const auto [kernel, aten] = timed_pair(row);
    check.speedup = seconds_per_call(aten, row.backend) / seconds_per_call(kernel, row.backend);
  }
}

}  // namespace

RowCheck check_row(const OpRow& row, bool timed) {
  const KernelSwitches restore;
  set_enabled(family_of(row.op), true);
  torch::manual_seed(47);
  RowCheck check{row, {}, 0, {}};
  try {
    check_outputs(check, timed);
  } catch (const std::exception& e) {
    // c10::Error's what() carries a C++ backtrace; its first line is the message.
    const std::string what = e.what();
    check.raised = what.substr(0, what.find('\n'));
    check.outputs.clear();
  }
  return check;
}

}  // namespace siamese::kernels
