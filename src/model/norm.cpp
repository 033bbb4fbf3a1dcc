#include "siamese/model/norm.h"

#include <ATen/autocast_mode.h>

#include <cmath>

#include "siamese/model/fused_norm.h"

namespace siamese::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// RMSNorm as one autograd node on the fused kernels (fused_norm.h):
//   y = x r w,  r = rsqrt(mean(x^2) + eps)
//   dx = r (dxhat - xhat mean(dxhat xhat)),  xhat = x r,  dxhat = dy w,  dw = sum(dy xhat)
// Saves x and the per-row r rather than xhat: a [rows] tensor instead of a second [B, T, d].
class RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               double eps) {
    const auto xc = x.contiguous();
    auto out = fused::rms_norm_forward(xc, weight, eps);
    ctx->save_for_backward({xc, out.r, weight});
    return out.y;
  }
  // Without an affine weight (autograd functions take no undefined tensor inputs).
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, double eps) {
    const auto xc = x.contiguous();
    auto out = fused::rms_norm_forward(xc, {}, eps);
    ctx->save_for_backward({xc, out.r});
    return out.y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const bool affine = saved.size() == 3;
    auto g = fused::rms_norm_backward(grads[0], saved[0], saved[1], affine ? saved[2] : torch::Tensor());
    if (!affine) return {g.dx, torch::Tensor()};
    return {g.dx, g.dw, torch::Tensor()};
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
  // Half inputs are normalized in float32 (CPU kernels reject mixed dtypes). Under autocast
  // the result stays float32, as CUDA autocast's layer_norm gives; a model cast to a half
  // dtype gets its dtype back.
  if (kind_ == NormKind::LayerNorm) {
    if (!x.is_floating_point() || x.element_size() >= 4)
      return torch::layer_norm(x, {dim_}, weight, bias, eps_);
    auto to_float = [](const torch::Tensor& t) { return t.defined() ? t.to(torch::kFloat) : t; };
    const auto h = torch::layer_norm(x.to(torch::kFloat), {dim_}, to_float(weight), to_float(bias), eps_);
    return at::autocast::is_autocast_enabled(x.device().type()) ? h : h.to(x.scalar_type());
  }
  // OLMo's RMSLayerNorm: x * rsqrt(mean(x^2) + eps), in float32 for half inputs, returned
  // in x's dtype (the fused kernels do both). Dtypes without a kernel go through float32.
  const auto in = fused::supports(x) ? x : x.to(torch::kFloat);
  auto h = weight.defined() ? RmsNormFunction::apply(in, weight, eps_) : RmsNormFunction::apply(in, eps_);
  h = h.to(x.scalar_type());
  return bias.defined() ? h + bias : h;
}

NormKind norm_kind(const ModelConfig& cfg) {
  if (cfg.layer_norm_type == "rms") return NormKind::RMS;
  if (cfg.layer_norm_type == "dyt") return NormKind::DyT;
  if (cfg.layer_norm_type == "derf") return NormKind::Derf;
  return NormKind::LayerNorm;
}

Norm make_norm(const ModelConfig& cfg, int64_t dim, std::optional<bool> affine) {
  const NormKind kind = norm_kind(cfg);
  const bool with_weight = affine.value_or(cfg.layer_norm_with_affine);
  return Norm(kind, dim, cfg.layer_norm_eps, with_weight, cfg.bias_for_layer_norm.value_or(cfg.include_bias),
              kind == NormKind::DyT ? cfg.dyt_alpha_init : cfg.derf_alpha_init, cfg.derf_shift_init);
}

int64_t norm_parameter_count(const ModelConfig& cfg, int64_t dim, std::optional<bool> affine) {
  const NormKind kind = norm_kind(cfg);
  int64_t n = kind == NormKind::DyT ? 1 : kind == NormKind::Derf ? 2 : 0;
  if (affine.value_or(cfg.layer_norm_with_affine))
    n += dim * (cfg.bias_for_layer_norm.value_or(cfg.include_bias) ? 2 : 1);
  return n;
}

Norm make_plain_rms_norm(const ModelConfig& cfg, int64_t dim) {
  return Norm(NormKind::RMS, dim, cfg.layer_norm_eps, /*affine=*/false, /*bias=*/false);
}

}  // namespace siamese::model
