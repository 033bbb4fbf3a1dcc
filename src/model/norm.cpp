#include "siamese/model/norm.h"

#include <cmath>

namespace siamese::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// RMSNorm as one autograd node with its backward written out:
//   xhat = x * r,  r = rsqrt(mean(x^2) + eps),  y = xhat * w
//   dx = r * (dxhat - xhat * mean(dxhat * xhat)),  dxhat = dy * w,  dw = sum(dy * xhat)
// The composite graph (pow, mean, add, rsqrt, mul, mul) costs about twice the passes over
// [B, T, d] in backward, and SiameseNorm runs three to four of these per sublayer.
class RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, double eps) {
    auto [xhat, r] = normalize(x, eps);
    ctx->save_for_backward({xhat, r, weight});
    return xhat * weight;
  }
  // Without an affine weight (autograd functions take no undefined tensor inputs).
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, double eps) {
    auto [xhat, r] = normalize(x, eps);
    ctx->save_for_backward({xhat, r});
    return xhat;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &xhat = saved[0], &r = saved[1];
    const auto& dy = grads[0];
    const bool affine = saved.size() == 3;
    const auto dxhat = affine ? dy * saved[2] : dy;
    auto proj = (dxhat * xhat).mean(-1, /*keepdim=*/true);
    auto dx = torch::addcmul(dxhat, xhat, proj, /*value=*/-1).mul_(r);
    if (!affine) return {dx, torch::Tensor()};
    return {dx, (dy * xhat).sum_to_size(saved[2].sizes()), torch::Tensor()};
  }

 private:
  // (x * r, r) with r = rsqrt(mean(x^2) + eps) per row.
  static std::pair<torch::Tensor, torch::Tensor> normalize(const torch::Tensor& x, double eps) {
    auto r = x.square().mean(-1, /*keepdim=*/true).add_(eps).rsqrt_();
    return {x * r, r};
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
    return torch::layer_norm(x.is_floating_point() && x.element_size() < 4 ? x.to(torch::kFloat) : x,
                             {dim_}, weight, bias, eps_);
  // OLMo's RMSLayerNorm: x * rsqrt(mean(x^2) + eps), in float32 for half inputs.
  const auto compute = x.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
  auto h = weight.defined() ? RmsNormFunction::apply(x.to(compute), weight, eps_)
                            : RmsNormFunction::apply(x.to(compute), eps_);
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
