#include "siamese/model/norm.h"

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

NormImpl::NormImpl(NormKind kind, int64_t dim, double eps, bool affine, bool bias)
    : kind_(kind), dim_(dim), eps_(eps) {
  if (affine) {
    weight = register_parameter("weight", torch::ones({dim}));
    if (bias) this->bias = register_parameter("bias", torch::zeros({dim}));
  }
}

torch::Tensor NormImpl::forward(const torch::Tensor& x) {
  // Half inputs (autocast) are normalized in float32 with the float32 affine parameters,
  // as CUDA autocast does for layer_norm; CPU kernels reject the mixed dtypes otherwise.
  if (kind_ == NormKind::LayerNorm)
    return torch::layer_norm(x.is_floating_point() && x.element_size() < 4 ? x.to(torch::kFloat) : x, {dim_},
                             weight, bias, eps_);
  // OLMo's RMSLayerNorm: x * rsqrt(mean(x^2) + eps), in float32 for half inputs, returned
  // in x's dtype (the fused kernels do both). Dtypes without a kernel go through float32.
  const auto in = fused::supports(x) ? x : x.to(torch::kFloat);
  auto h = weight.defined() ? RmsNormFunction::apply(in, weight, eps_) : RmsNormFunction::apply(in, eps_);
  h = h.to(x.scalar_type());
  return bias.defined() ? h + bias : h;
}

static NormKind kind_of(const ModelConfig& cfg) {
  return cfg.layer_norm_type == "rms" ? NormKind::RMS : NormKind::LayerNorm;
}

Norm make_norm(const ModelConfig& cfg, int64_t dim) {
  return Norm(kind_of(cfg), dim, cfg.layer_norm_eps, cfg.layer_norm_with_affine,
              cfg.bias_for_layer_norm.value_or(cfg.include_bias));
}

Norm make_plain_rms_norm(const ModelConfig& cfg, int64_t dim) {
  return Norm(NormKind::RMS, dim, cfg.layer_norm_eps, /*affine=*/false, /*bias=*/false);
}

}  // namespace siamese::model
