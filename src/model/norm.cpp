#include "siamese/model/norm.h"

#include <cmath>

namespace siamese::model {

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
  auto h = x.to(compute);
  h = (h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps_)).to(x.scalar_type());
  if (!weight.defined()) return h;
  return bias.defined() ? weight * h + bias : weight * h;
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
