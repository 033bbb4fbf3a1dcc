#pragma once
// The feed-forward sublayer. Dense (block_type sequential): ff_out(act(ff_proj(x))). SwiGLU
// splits ff_proj's output in two, value first and gate second (OLMo: x, gate = chunk(2);
// silu(gate) * x), so ff_out reads half the hidden size. Hidden size = mlp_hidden_size, else
// mlp_ratio * d_model.
//
// Sparse (block_type moe, OLMoE): a linear router without bias scores moe_num_experts SwiGLU
// experts per token; softmax over the experts (in float32, as transformers' OLMoE), the top
// moe_top_k probabilities weight those experts' outputs (raw, as OLMoE; rescaled to sum 1 with
// moe_norm_topk_prob). Expert e is the dense SwiGLU with weights experts.ff_proj[e]
// [2 * inner, d] and experts.ff_out[e] [d, inner], inner = mlp_inner_size (OLMoE's
// moe_intermediate_size: mlp_ratio 1 and d_model 2048 give 1024). With moe_shared_expert,
// ff_proj / ff_out are an always-used dense expert added on top (DeepSeekMoE).
// Tokens are grouped by expert (a stable sort of the assignments, so each expert sees its
// tokens in order), the experts run on them, and one index_add scatters the weighted outputs
// back. The experts run as LibTorch's grouped GEMM (at::_grouped_mm: one call per projection
// over every expert's rows) wherever LibTorch has it for the operands (CUDA under bf16,
// CUTLASS on sm_90; the CPU in float32, bf16 and fp16), else, and with moe_mlp_impl loop, as
// one matmul pair per expert.
// moe_dropless false keeps at most int(moe_capacity_factor * tokens * top_k /
// num_experts) tokens per expert, the earliest ones (megablocks' rule), and drops the rest.
#include <torch/torch.h>

#include <vector>

#include "siamese/config/config.h"
#include "siamese/model/aux_loss.h"
#include "siamese/model/sublayer_hooks.h"

namespace siamese::model {

// A sparse MLP's forward: the output, its auxiliary losses and how it routed the tokens.
struct MoeOutput : ExpertLoad {
  torch::Tensor out;
  // Switch Transformer's load-balancing loss (OLMoE's, per block): num_experts * sum_e f_e * P_e,
  // f_e the share of the token-to-expert assignments that went to e (before any dropping)
  // and P_e the mean router probability of e; 1 when both are uniform. transformers'
  // load_balancing_loss_func counts f_e per token instead of per assignment: top_k times this.
  torch::Tensor load_balancing;
  // Router z-loss (ST-MoE): mean over tokens of logsumexp(router logits)^2.
  torch::Tensor z_loss;
};

// The metrics keys of the auxiliary losses a sparse MLP adds to AuxLosses.
inline constexpr const char* kMoeLoadBalancingLoss = "moe_lbl_loss";
inline constexpr const char* kMoeZLoss = "moe_z_loss";

class MlpImpl : public torch::nn::Module {
 public:
  // `hooks`: what the residual topology changes in it (topology.h, sublayer_hooks).
  explicit MlpImpl(const config::ModelConfig& cfg, SublayerHooks hooks = {});

  // With `aux`, a sparse MLP adds its auxiliary losses (each over the model's block count,
  // so that the blocks' sum is their mean) and its routing, and attaches the losses at
  // moe_loss_weight and moe_zloss_weight to its output (aux_loss.h).
  torch::Tensor forward(const torch::Tensor& x, AuxLosses* aux = nullptr);
  // A sparse MLP's forward with what it computed beside the output.
  MoeOutput route(const torch::Tensor& x);

  // Dense: the MLP. Sparse: the shared expert (null without moe_shared_expert).
  torch::nn::Linear ff_proj{nullptr}, ff_out{nullptr};
  // Sparse only: router weight [num_experts, d]; experts' stacked SwiGLU weights.
  torch::nn::Linear router{nullptr};
  torch::Tensor expert_ff_proj, expert_ff_out;

 private:
  torch::Tensor activate(const torch::Tensor& h) const;
  // The routed experts on `inputs`, the kept assignments' rows in expert order, `kept[e]`
  // of them for expert e: one grouped GEMM per projection, or one matmul pair per expert.
  bool runs_grouped(const torch::Tensor& inputs) const;
  torch::Tensor grouped_experts(const torch::Tensor& inputs, const std::vector<int64_t>& kept) const;
  torch::Tensor looped_experts(const torch::Tensor& inputs, const std::vector<int64_t>& kept) const;

  config::Activation activation_;
  SublayerHooks hooks_;
  int64_t top_k_ = 0;
  bool norm_topk_ = false, dropless_ = true, lbl_in_fp32_ = false, loop_ = false;
  double capacity_factor_ = 1.0;
  double blocks_ = 1;                                     // the model's, over which losses are averaged
  double load_balancing_weight_ = 0, z_loss_weight_ = 0;  // moe_loss_weight, moe_zloss_weight
};
TORCH_MODULE(Mlp);

// ff_proj's output width and ff_out's input width for this config (also each expert's).
int64_t mlp_hidden_size(const config::ModelConfig& cfg);
int64_t mlp_inner_size(const config::ModelConfig& cfg);

// Experts each token runs: top_k (plus the shared one) with block_type moe, else 1.
int64_t active_experts(const config::ModelConfig& cfg);

}  // namespace siamese::model
