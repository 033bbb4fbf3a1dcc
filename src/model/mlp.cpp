#include "siamese/model/mlp.h"

namespace siamese::model {

int64_t mlp_hidden_size(const ModelConfig& cfg) {
  return cfg.mlp_hidden_size.value_or(cfg.mlp_ratio * cfg.d_model);
}

int64_t mlp_inner_size(const ModelConfig& cfg) {
  return cfg.activation_type == "swiglu" ? mlp_hidden_size(cfg) / 2 : mlp_hidden_size(cfg);
}

MlpImpl::MlpImpl(const ModelConfig& cfg, SublayerHooks hooks)
    : activation_(cfg.activation_type), hooks_(std::move(hooks)) {
  ff_proj = register_module(
      "ff_proj",
      torch::nn::Linear(torch::nn::LinearOptions(cfg.d_model, mlp_hidden_size(cfg)).bias(cfg.include_bias)));
  ff_out = register_module(
      "ff_out",
      torch::nn::Linear(torch::nn::LinearOptions(mlp_inner_size(cfg), cfg.d_model).bias(cfg.include_bias)));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  auto h = ff_proj(x);
  if (activation_ == "swiglu") {
    auto parts = h.chunk(2, -1);
    if (hooks_.swiglu) std::tie(parts[0], parts[1]) = hooks_.swiglu(parts[0], parts[1]);
    h = torch::silu(parts[1]) * parts[0];
  } else if (activation_ == "gelu") {
    h = torch::gelu(h);
  } else {
    h = torch::relu(h);
  }
  return ff_out(h);
}

}  // namespace siamese::model
