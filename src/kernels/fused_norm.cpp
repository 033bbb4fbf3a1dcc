// The fused-norm API (fused_norm.h): checks and allocates tensors, and sends CPU tensors to the
// CPU loops and CUDA tensors to the CUDA kernels through fused_norm_kernels.h. The autograd
// nodes over it are the model's (model/norm.cpp, model/stream_update.cpp).
#include "siamese/kernels/fused_norm.h"
#include "siamese/kernels/families.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "fused_norm_kernels.h"

namespace siamese::kernels {
namespace {

using torch::Tensor;

DType dtype_of(const Tensor& x) {
  switch (x.scalar_type()) {
    case torch::kFloat:
      return DType::Float32;
    case torch::kDouble:
      return DType::Float64;
    case torch::kBFloat16:
      return DType::BFloat16;
    case torch::kHalf:
      return DType::Float16;
    default:
      break;
  }
  TORCH_CHECK(false, "fused norm: no kernel for ", x.scalar_type());
  return DType::Float32;
}

torch::ScalarType acc_type(const Tensor& x) {
  return x.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
}

void check_input(const Tensor& x) {
  TORCH_CHECK(norm_supports(x), "fused norm: no kernel for ", x.scalar_type(), " on ", x.device());
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0, "fused norm: needs a last dimension, got ", x.sizes());
}

// t made contiguous after checking it matches x, in x's dtype unless another is given
// (undefined stays undefined).
Tensor like(const Tensor& t, const Tensor& x, const char* name,
            torch::ScalarType dtype = torch::ScalarType::Undefined) {
  if (!t.defined()) return t;
  if (dtype == torch::ScalarType::Undefined) dtype = x.scalar_type();
  TORCH_CHECK(t.sizes() == x.sizes() && t.scalar_type() == dtype && t.device() == x.device(),
              "fused norm: ", name, " is ", t.scalar_type(), t.sizes(), " on ", t.device(), ", expected ",
              dtype, x.sizes(), " on ", x.device());
  return t.contiguous();
}

// The weight as the kernels read it: accumulation type, x's device, contiguous; ones for an
// unweighted norm.
Tensor acc_weight(const Tensor& w, const Tensor& x) {
  const auto opts = x.options().dtype(acc_type(x));
  if (!w.defined()) return torch::ones({x.size(-1)}, opts);
  TORCH_CHECK(w.numel() == x.size(-1), "fused norm: weight of ", w.numel(), " elements for rows of ",
              x.size(-1));
  return w.to(opts).contiguous();
}

std::vector<int64_t> row_shape(const Tensor& x) {
  auto s = x.sizes().vec();
  s.back() = 1;
  return s;
}
Tensor per_row(const Tensor& x) { return torch::empty(row_shape(x), x.options().dtype(acc_type(x))); }
Tensor like_x(const Tensor& x) { return torch::empty(x.sizes(), x.options()); }
int64_t rows_of(const Tensor& x) { return x.numel() / x.size(-1); }

// A per-row tensor the forward saved (r, mu), checked against x's rows, in the
// accumulation type.
Tensor per_row_saved(const Tensor& t, const Tensor& x, const char* name) {
  TORCH_CHECK(t.defined() && t.numel() == rows_of(x), "fused norm: ", name, " missing or misshapen");
  return t.to(acc_type(x)).contiguous();
}

// Null for an undefined tensor (an absent gradient).
const void* ptr(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }
void* out_ptr(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

// A norm's weight gradient: the row groups' partial sums and their total; none for a norm
// that is off or has no weight.
struct WeightGrad {
  Tensor partial, dw;
  WeightGrad(const Tensor& x, bool weighted) {
    if (!weighted) return;
    const auto opts = x.options().dtype(acc_type(x));
    partial = torch::empty({weight_grad_parts(rows_of(x), x.is_cuda()), x.size(-1)}, opts);
    dw = torch::zeros({x.size(-1)}, opts);
  }
  // In the parameter's shape and dtype (undefined without a parameter).
  Tensor result(const Tensor& weight) const {
    if (!weight.defined()) return {};
    return dw.to(weight.scalar_type()).view(weight.sizes());
  }
};

// On x's device: the CPU loops, or the CUDA kernels on the current stream.
template <typename Args>
void run(const Tensor& x, const Args& a) {
  if (!x.is_cuda()) return run_cpu(a);
  const c10::cuda::CUDAGuard guard(x.device());
  const char* err = run_cuda(a, at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(!err, "fused norm: CUDA kernel failed: ", err);
}

}  // namespace

bool norm_supports(const Tensor& x) { return takes(Family::Norm, x); }

NormOut norm_forward(const Tensor& x_in, const Tensor& weight, double eps, bool centered, bool float_out) {
  check_input(x_in);
  const auto x = x_in.contiguous();
  const auto w = acc_weight(weight, x);
  const auto out_type = float_out && x.element_size() < 4 ? torch::kFloat : x.scalar_type();
  NormOut out{torch::empty(x.sizes(), x.options().dtype(out_type)), per_row(x),
              centered ? per_row(x) : Tensor()};
  run(x, NormForwardArgs{dtype_of(x), dtype_of(out.y), rows_of(x), x.size(-1), eps, centered, x.data_ptr(),
                         w.data_ptr(), out.y.data_ptr(), out.r.data_ptr(), out_ptr(out.mu)});
  return out;
}

NormGrads norm_backward(const Tensor& dy_in, const Tensor& x_in, const Tensor& r, const Tensor& mu,
                        const Tensor& weight) {
  check_input(x_in);
  const auto x = x_in.contiguous();
  // dy comes in x's dtype, or in float32 from a half x's float output.
  const bool float_dy = dy_in.scalar_type() == torch::kFloat && x.element_size() < 4;
  const auto dy = like(dy_in, x_in, "dy", float_dy ? torch::kFloat : x.scalar_type());
  const auto r_acc = per_row_saved(r, x, "r");
  const auto mu_acc = mu.defined() ? per_row_saved(mu, x, "mu") : Tensor();
  const auto w = acc_weight(weight, x);
  const WeightGrad g(x, weight.defined());
  NormGrads out{like_x(x), {}};
  run(x, NormBackwardArgs{dtype_of(x), dtype_of(dy), rows_of(x), x.size(-1), mu.defined(), x.data_ptr(),
                          r_acc.data_ptr(), ptr(mu_acc), w.data_ptr(), dy.data_ptr(), out.dx.data_ptr(),
                          out_ptr(g.dw), out_ptr(g.partial)});
  out.dw = g.result(weight);
  return out;
}

StreamUpdateOut stream_update_forward(const Tensor& x_in, const Tensor& y_in, const Tensor& o_in,
                                      double alpha, const StreamNormSpec& norm_x,
                                      const StreamNormSpec& norm_y) {
  check_input(x_in);
  const bool two = y_in.defined();
  TORCH_CHECK(two || !norm_y.on, "stream update: Y's norm without a Y stream");
  const auto x = x_in.contiguous(), y = two ? like(y_in, x_in, "y") : Tensor(), o = like(o_in, x_in, "o");
  StreamUpdateOut out{like_x(x), two ? like_x(x) : Tensor(), {}, {}, {}, {}, {}, {}};
  Tensor w[2];  // alive until the kernels have run
  auto norm = [&](const StreamNormSpec& spec, Tensor& w, Tensor& n, Tensor& r, Tensor& mu) {
    if (!spec.on) return StreamNorm{};
    w = acc_weight(spec.weight, x);
    n = like_x(x);
    r = per_row(x);
    if (spec.centered) mu = per_row(x);
    return StreamNorm{true, spec.centered, spec.eps, w.data_ptr(), n.data_ptr(), r.data_ptr(), out_ptr(mu)};
  };
  run(x, StreamForwardArgs{dtype_of(x), rows_of(x), x.size(-1), alpha, x.data_ptr(), ptr(y), o.data_ptr(),
                           out.x.data_ptr(), out_ptr(out.y), norm(norm_x, w[0], out.nx, out.rx, out.mux),
                           norm(norm_y, w[1], out.ny, out.ry, out.muy)});
  return out;
}

StreamUpdateGrads stream_update_backward(const Tensor& d_x_out, const Tensor& d_y_out, const Tensor& d_nx,
                                         const Tensor& d_ny, const StreamUpdateOut& saved, double alpha,
                                         const StreamNormSpec& norm_x, const StreamNormSpec& norm_y) {
  const auto& x_ref = saved.x;
  check_input(x_ref);
  const bool two = saved.y.defined();
  const auto x = x_ref.contiguous(), y = two ? like(saved.y, x_ref, "y'") : Tensor();
  const auto gx = like(d_x_out, x_ref, "dx'"), gy = two ? like(d_y_out, x_ref, "dy'") : Tensor();
  const WeightGrad grad_wx(x, norm_x.on && norm_x.weight.defined()),
      grad_wy(x, norm_y.on && norm_y.weight.defined());
  Tensor keep[2][4];  // alive until the kernels have run
  auto norm = [&](const StreamNormSpec& spec, const Tensor& r, const Tensor& mu, const Tensor& dn,
                  const WeightGrad& g, Tensor(&k)[4]) {
    if (!spec.on) return StreamNorm{};
    k[0] = acc_weight(spec.weight, x);
    k[1] = per_row_saved(r, x, "r");
    if (spec.centered) k[2] = per_row_saved(mu, x, "mu");
    k[3] = like(dn, x_ref, "the norm's gradient");
    return StreamNorm{true,          spec.centered,     spec.eps,      k[0].data_ptr(),
                      nullptr,       k[1].data_ptr(),   out_ptr(k[2]), ptr(k[3]),
                      out_ptr(g.dw), out_ptr(g.partial)};
  };
  // One stream with alpha 1: o's gradient is x's, the same tensor, not a copy.
  const bool same_grad = !two && alpha == 1.0;
  StreamUpdateGrads out{like_x(x), two ? like_x(x) : Tensor(), {}, {}, {}};
  out.d_o = same_grad ? out.dx : like_x(x);
  run(x,
      StreamBackwardArgs{dtype_of(x), rows_of(x), x.size(-1), alpha, x.data_ptr(), ptr(y), ptr(gx), ptr(gy),
                         out.dx.data_ptr(), out_ptr(out.dy), same_grad ? nullptr : out.d_o.data_ptr(),
                         norm(norm_x, saved.rx, saved.mux, d_nx, grad_wx, keep[0]),
                         norm(norm_y, saved.ry, saved.muy, d_ny, grad_wy, keep[1])});
  out.dw_x = grad_wx.result(norm_x.on ? norm_x.weight : Tensor());
  out.dw_y = grad_wy.result(norm_y.on ? norm_y.weight : Tensor());
  return out;
}

}  // namespace siamese::kernels
