#pragma once
// The feed-forward sublayer: ff_out(act(ff_proj(x))). SwiGLU splits ff_proj's output in
// two, value first and gate second (OLMo: x, gate = chunk(2); silu(gate) * x), so ff_out
// reads half the hidden size. Hidden size = mlp_hidden_size, else mlp_ratio * d_model.
#include <torch/torch.h>

#include "siamese/config/config.h"
#include "siamese/model/sublayer_hooks.h"

namespace siamese::model {

class MlpImpl : public torch::nn::Module {
 public:
  // `hooks`: what the residual topology changes in it (topology.h, sublayer_hooks).
  explicit MlpImpl(const ModelConfig& cfg, SublayerHooks hooks = {});

  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::Linear ff_proj{nullptr}, ff_out{nullptr};

 private:
  std::string activation_;
  SublayerHooks hooks_;
};
TORCH_MODULE(Mlp);

// ff_proj's output width and ff_out's input width for this config.
int64_t mlp_hidden_size(const ModelConfig& cfg);
int64_t mlp_inner_size(const ModelConfig& cfg);

}  // namespace siamese::model
