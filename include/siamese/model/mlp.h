#pragma once
// A block's feed-forward sublayer, chosen when the block is built (make_feed_forward): the
// dense MLP here, the sparse MoE MLP in moe_mlp.h. Both show the transformer their matrices
// by role, so init, init gains and weight projections need not know which one it is.
//
// Dense (block_type sequential): ff_out(act(ff_proj(x))). SwiGLU splits ff_proj's output in
// two, value first and gate second (OLMo: x, gate = chunk(2); silu(gate) * x), so ff_out reads
// half the hidden size. Hidden size = mlp_hidden_size, else mlp_ratio * d_model.
#include <torch/torch.h>

#include <memory>
#include <vector>

#include "siamese/config/config.h"
#include "siamese/model/aux_loss.h"
#include "siamese/model/sublayer_hooks.h"

namespace siamese::model {

// What a feed-forward matrix is to init and to nGPT's projection.
enum class FfnRole {
  Input,   // reads the block's input: d_model is its last dim (ff_proj, an expert's ff_proj)
  Output,  // writes the block's output: d_model is its second-last dim (ff_out)
  Router,  // scores experts: drawn as an input, no init gain, not projected
};

struct FfnMatrix {
  FfnRole role;
  torch::Tensor weight;  // [.., out, in]
  torch::Tensor bias;    // undefined without include_bias
};

class FeedForwardImpl : public torch::nn::Module {
 public:
  // `aux`: where a sparse MLP attaches its auxiliary losses and leaves its values; the dense
  // MLP ignores it.
  virtual torch::Tensor forward(const torch::Tensor& x, AuxLosses* aux = nullptr) = 0;
  // Every matrix, in the order init draws them.
  virtual std::vector<FfnMatrix> matrices() = 0;
};
using FeedForward = std::shared_ptr<FeedForwardImpl>;

// The activation on ff_proj's output `h`, SwiGLU through its kernel where the topology's
// hooks leave it alone (kernels/swiglu.h).
torch::Tensor activate(config::Activation activation, const SublayerHooks& hooks, const torch::Tensor& h);

class MlpImpl : public FeedForwardImpl {
 public:
  // `hooks`: what the residual topology changes in it (topology.h, sublayer_hooks).
  explicit MlpImpl(const config::ModelConfig& cfg, SublayerHooks hooks = {});
  torch::Tensor forward(const torch::Tensor& x, AuxLosses* aux = nullptr) override;
  std::vector<FfnMatrix> matrices() override;

  torch::nn::Linear ff_proj{nullptr}, ff_out{nullptr};

 private:
  config::Activation activation_;
  SublayerHooks hooks_;
};
TORCH_MODULE(Mlp);

// Block `layer`'s feed-forward: the sparse MoE MLP with block_type moe, else the dense one.
FeedForward make_feed_forward(const config::ModelConfig& cfg, const SublayerHooks& hooks, int64_t layer);

// ff_proj's output width and ff_out's input width for this config (also each expert's).
int64_t mlp_hidden_size(const config::ModelConfig& cfg);
int64_t mlp_inner_size(const config::ModelConfig& cfg);

// Experts each token runs: top_k (plus the shared one) with block_type moe, else 1.
int64_t active_experts(const config::ModelConfig& cfg);

}  // namespace siamese::model
