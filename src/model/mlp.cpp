#include "siamese/model/mlp.h"

#include "siamese/kernels/swiglu.h"
#include "siamese/model/moe_mlp.h"

namespace siamese::model {

int64_t mlp_hidden_size(const config::ModelConfig& cfg) {
  return cfg.mlp_hidden_size.value_or(cfg.mlp_ratio * cfg.d_model);
}

int64_t mlp_inner_size(const config::ModelConfig& cfg) {
  return cfg.activation_type == config::Activation::SwiGLU ? mlp_hidden_size(cfg) / 2 : mlp_hidden_size(cfg);
}

int64_t active_experts(const config::ModelConfig& cfg) {
  return cfg.is_moe() ? cfg.moe_top_k + (cfg.moe_shared_expert ? 1 : 0) : 1;
}

namespace {

// SwiGLU as one autograd node on kernels/swiglu.h's passes, on the CPU and on CUDA. Saves only
// h, the MLP's projection output (LibTorch's form keeps b, silu(b) and a).
class SwigluFunction : public torch::autograd::Function<SwigluFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& h) {
    ctx->save_for_backward({h});
    return kernels::swiglu(h);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return {kernels::swiglu_backward(ctx->get_saved_variables()[0], grads[0])};
  }
};

}  // namespace

torch::Tensor activate(config::Activation activation, const SublayerHooks& hooks, const torch::Tensor& h) {
  if (activation == config::Activation::SwiGLU) {
    if (!hooks.swiglu && kernels::swiglu_supports(h)) return SwigluFunction::apply(h);
    auto parts = h.chunk(2, -1);
    if (hooks.swiglu) std::tie(parts[0], parts[1]) = hooks.swiglu(parts[0], parts[1]);
    return torch::silu(parts[1]) * parts[0];
  }
  return activation == config::Activation::GELU ? torch::gelu(h) : torch::relu(h);
}

MlpImpl::MlpImpl(const config::ModelConfig& cfg, SublayerHooks hooks)
    : activation_(cfg.activation_type), hooks_(std::move(hooks)) {
  ff_proj = register_module(
      "ff_proj",
      torch::nn::Linear(torch::nn::LinearOptions(cfg.d_model, mlp_hidden_size(cfg)).bias(cfg.include_bias)));
  ff_out = register_module(
      "ff_out",
      torch::nn::Linear(torch::nn::LinearOptions(mlp_inner_size(cfg), cfg.d_model).bias(cfg.include_bias)));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x, AuxLosses*) {
  return ff_out(activate(activation_, hooks_, ff_proj(x)));
}

std::vector<FfnMatrix> MlpImpl::matrices() {
  return {{FfnRole::Input, ff_proj->weight, ff_proj->bias}, {FfnRole::Output, ff_out->weight, ff_out->bias}};
}

FeedForward make_feed_forward(const config::ModelConfig& cfg, const SublayerHooks& hooks, int64_t layer) {
  if (cfg.is_moe()) return std::make_shared<MoeMlpImpl>(cfg, hooks, layer);
  return std::make_shared<MlpImpl>(cfg, hooks);
}

}  // namespace siamese::model
