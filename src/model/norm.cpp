#include "siamese/model/norm.h"

#include <ATen/autocast_mode.h>

#include <cmath>

#include "siamese/kernels/families.h"
#include "siamese/kernels/fused_norm.h"

namespace siamese::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// RMSNorm or LayerNorm (without bias) as one autograd node on the fused kernels
// (siamese/kernels/fused_norm.h); with xhat = (x - mu) r, dxhat = dy w:
//   y = xhat w,  dx = r (dxhat - mean(dxhat) - xhat mean(dxhat xhat)),  dw = sum(dy xhat)
// where RMSNorm has mu = 0 and no mean(dxhat) term. Saves x and the per-row r (and mu)
// rather than xhat: [rows] tensors instead of a second [B, T, d].
class NormFunction : public torch::autograd::Function<NormFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               double eps, bool centered, bool float_out) {
    return run(ctx, x, weight, eps, centered, float_out);
  }
  // Without an affine weight (autograd functions take no undefined tensor inputs).
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, double eps, bool centered,
                               bool float_out) {
    return run(ctx, x, {}, eps, centered, float_out);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const bool affine = saved.size() == 4;
    auto g =
        kernels::norm_backward(grads[0], saved[0], saved[1], saved[2], affine ? saved[3] : torch::Tensor());
    if (!affine) return {g.dx, torch::Tensor(), torch::Tensor(), torch::Tensor()};
    return {g.dx, g.dw, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }

 private:
  static torch::Tensor run(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                           double eps, bool centered, bool float_out) {
    const auto xc = x.contiguous();
    auto out = kernels::norm_forward(xc, weight, eps, centered, float_out);
    if (weight.defined())
      ctx->save_for_backward({xc, out.r, out.mu, weight});
    else
      ctx->save_for_backward({xc, out.r, out.mu});
    return out.y;
  }
};

}  // namespace

NormImpl::NormImpl(NormKind kind, int64_t dim, double eps, bool affine, bool bias, double alpha_init,
                   double shift_init)
    : kind_(kind), dim_(dim), eps_(eps) {
  if (affine) {
    weight = register_parameter("weight", torch::ones({dim}));
    if (bias) this->bias = register_parameter("bias", torch::zeros({dim}));
  }
  if (kind == NormKind::DyT || kind == NormKind::Derf)
    alpha = register_parameter("alpha", torch::full({1}, alpha_init));
  if (kind == NormKind::Derf) shift = register_parameter("shift", torch::full({1}, shift_init));
}

torch::Tensor NormImpl::forward(const torch::Tensor& x) {
  if (kind_ == NormKind::DyT || kind_ == NormKind::Derf) {
    // Point-wise: float32 for half inputs (the [1] scalars promote them), returned in x's dtype
    // as RMSNorm does.
    auto h = kind_ == NormKind::DyT ? torch::tanh(alpha * x) : torch::erf(alpha * x + shift);
    if (weight.defined()) h = h * weight;
    if (bias.defined()) h = h + bias;
    return h.to(x.scalar_type());
  }
  // Half inputs are normalized in float32 (the fused kernels compute in float32; dtypes
  // without a kernel are converted). LayerNorm adds its bias in float32 and returns float32
  // under autocast, as CUDA autocast's layer_norm does, else x's dtype. OLMo's RMSLayerNorm
  // returns x's dtype and adds the bias after. A float32 or float64 LayerNorm is ATen's:
  // its vectorized kernel beats ours on wide rows (H100, results.md), and ours pays only
  // where it also takes a half input's conversion.
  if (kind_ == NormKind::LayerNorm && x.element_size() >= 4)
    return torch::layer_norm(x, {dim_}, weight, bias, eps_);
  if (!kernels::enabled(kernels::Family::Norm)) return aten_forward(x);
  const auto in = kernels::norm_supports(x) ? x : x.to(torch::kFloat);
  auto norm = [&](bool centered, bool float_out) {
    return weight.defined() ? NormFunction::apply(in, weight, eps_, centered, float_out)
                            : NormFunction::apply(in, eps_, centered, float_out);
  };
  if (kind_ == NormKind::LayerNorm) {
    const bool autocast = at::autocast::is_autocast_enabled(x.device().type());
    auto h = norm(/*centered=*/true, /*float_out=*/autocast || bias.defined());
    if (bias.defined()) h = h + bias;
    return autocast ? h : h.to(x.scalar_type());
  }
  const auto h = norm(/*centered=*/false, /*float_out=*/false).to(x.scalar_type());
  return bias.defined() ? h + bias : h;
}

// model.kernels.norm: aten. The same dtypes as the fused path: half inputs normalized in
// float32, LayerNorm's output float32 under autocast.
torch::Tensor NormImpl::aten_forward(const torch::Tensor& x) {
  const auto wide = x.element_size() >= 4 ? x : x.to(torch::kFloat);
  if (kind_ == NormKind::LayerNorm) {
    const auto h = torch::layer_norm(wide, {dim_}, weight, bias, eps_);
    return at::autocast::is_autocast_enabled(x.device().type()) ? h : h.to(x.scalar_type());
  }
  auto h = wide * torch::rsqrt(wide.pow(2).mean(-1, true) + eps_);
  if (weight.defined()) h = h * weight;
  h = h.to(x.scalar_type());
  return bias.defined() ? h + bias : h;
}

NormKind norm_kind(const config::ModelConfig& cfg) {
  switch (cfg.layer_norm_type) {
    case config::LayerNormType::RMS:
      return NormKind::RMS;
    case config::LayerNormType::DyT:
      return NormKind::DyT;
    case config::LayerNormType::Derf:
      return NormKind::Derf;
    case config::LayerNormType::Default:
    case config::LayerNormType::LowPrecision:
      break;
  }
  return NormKind::LayerNorm;
}

Norm make_norm(const config::ModelConfig& cfg, int64_t dim, std::optional<bool> affine) {
  const NormKind kind = norm_kind(cfg);
  const bool with_weight = affine.value_or(cfg.layer_norm_with_affine);
  return Norm(kind, dim, cfg.layer_norm_eps, with_weight, cfg.bias_for_layer_norm.value_or(cfg.include_bias),
              kind == NormKind::DyT ? cfg.dyt_alpha_init : cfg.derf_alpha_init, cfg.derf_shift_init);
}

int64_t norm_parameter_count(const config::ModelConfig& cfg, int64_t dim, std::optional<bool> affine) {
  const NormKind kind = norm_kind(cfg);
  int64_t n = kind == NormKind::DyT ? 1 : kind == NormKind::Derf ? 2 : 0;
  if (affine.value_or(cfg.layer_norm_with_affine))
    n += dim * (cfg.bias_for_layer_norm.value_or(cfg.include_bias) ? 2 : 1);
  return n;
}

Norm make_plain_rms_norm(const config::ModelConfig& cfg, int64_t dim) {
  return Norm(NormKind::RMS, dim, cfg.layer_norm_eps, /*affine=*/false, /*bias=*/false);
}

}  // namespace siamese::model
