#pragma once
// The sparse feed-forward (block_type moe, OLMoE): a linear router without bias scores
// moe_num_experts SwiGLU experts per token; softmax over the experts (in float32, as
// transformers' OLMoE), the top moe_top_k probabilities weight those experts' outputs (raw, as
// OLMoE; rescaled to sum 1 with moe_norm_topk_prob). Expert e is the dense SwiGLU with weights
// experts.ff_proj[e] [2 * inner, d] and experts.ff_out[e] [d, inner], inner = mlp_inner_size
// (OLMoE's moe_intermediate_size: mlp_ratio 1 and d_model 2048 give 1024). With
// moe_shared_expert, ff_proj / ff_out are an always-used dense expert added on top
// (DeepSeekMoE).
// Tokens are grouped by expert (a stable sort of the assignments, so each expert sees its
// tokens in order), the experts run on them, and one index_add scatters the weighted outputs
// back. The experts run as LibTorch's grouped GEMM (at::_grouped_mm: one call per projection
// over every expert's rows) wherever LibTorch has it for the operands (CUDA under bf16,
// CUTLASS on sm_90; the CPU in float32, bf16 and fp16), else, and with moe_mlp_impl loop, as
// one matmul pair per expert. Dropless on the grouped GEMM, a forward never waits for the
// device: the expert counts stay there.
// moe_dropless false keeps at most int(moe_capacity_factor * tokens * top_k /
// num_experts) tokens per expert, the earliest ones (megablocks' rule), and drops the rest.
// With moe_router_bias_rate (DeepSeek-V3's auxiliary-loss-free balancing, OLMo-core's
// bias_gamma), the top-k choice ranks probs + score_bias while the weights stay the probs; the
// float32 buffer score_bias (in every checkpoint) moves after each step by rate * sign(mean
// load - load), the loads being every rank's and micro-batch's assignments of the step.
// moe_lb_loss_granularity instance counts the load-balancing loss per sequence (OLMo-core's
// instance granularity, DeepSeek-V3's sequence-wise balance loss).
//
// What it leaves in the step's record (step_values.h), all ranks' tokens together: its two
// auxiliary losses, and the routing as moe_load_min / moe_load_max (an expert's share of a
// block's assignments, over blocks and experts; 1 / num_experts when even), moe_load_entropy
// (of each block's shares, mean over blocks, nats), moe_dropped_fraction, and with
// moe_log_expert_assignment moe_expert_tokens [blocks][experts].
#include <torch/torch.h>

#include <vector>

#include "siamese/model/mlp.h"

namespace siamese::model {

// A sparse MLP's forward: the output, its auxiliary losses and how it routed the tokens.
struct MoeOutput {
  torch::Tensor out;
  // Switch Transformer's load-balancing loss (OLMoE's, per block): num_experts * sum_e f_e * P_e,
  // f_e the share of the token-to-expert assignments that went to e (before any dropping)
  // and P_e the mean router probability of e; 1 when both are uniform. transformers'
  // load_balancing_loss_func counts f_e per token instead of per assignment: top_k times this.
  torch::Tensor load_balancing;
  // Router z-loss (ST-MoE): mean over tokens of logsumexp(router logits)^2.
  torch::Tensor z_loss;
  torch::Tensor tokens_per_expert;  // int64 [experts] on the device: assignments, before dropping
  torch::Tensor experts, weights;   // [tokens, top_k]: each token's chosen experts and their weights
  torch::Tensor dropped;            // int64 scalar on the device: assignments over an expert's capacity
  int64_t assignments = 0;          // tokens * top_k
};

// The metrics keys of the auxiliary losses a sparse MLP reports.
inline constexpr const char* kMoeLoadBalancingLoss = "moe_lbl_loss";
inline constexpr const char* kMoeZLoss = "moe_z_loss";

class MoeMlpImpl : public FeedForwardImpl {
 public:
  // `layer`: the block's index, its row of the routing counts.
  MoeMlpImpl(const config::ModelConfig& cfg, SublayerHooks hooks = {}, int64_t layer = 0);

  // With `aux`, adds its auxiliary losses (each over the model's block count, so that the
  // blocks' sum is their mean, times the micro-batch's share) and its routing to aux->values,
  // and attaches the losses at moe_loss_weight and moe_zloss_weight to its output
  // (aux_loss.h).
  torch::Tensor forward(const torch::Tensor& x, AuxLosses* aux = nullptr) override;
  std::vector<FfnMatrix> matrices() override;
  // The forward with what it computed beside the output.
  MoeOutput route(const torch::Tensor& x);

  // The shared expert (null without moe_shared_expert).
  torch::nn::Linear ff_proj{nullptr}, ff_out{nullptr};
  // Router weight [num_experts, d]; the experts' stacked SwiGLU weights.
  torch::nn::Linear router{nullptr};
  torch::Tensor expert_ff_proj, expert_ff_out;
  // float32 [experts] with moe_router_bias_rate, else undefined.
  torch::Tensor score_bias;

 private:
  void record(const MoeOutput& r, AuxLosses& aux) const;
  // The routed experts on `inputs`, the kept assignments' rows in expert order, `kept[e]`
  // of them for expert e (int64 on the device): one grouped GEMM per projection, or one
  // matmul pair per expert.
  bool runs_grouped(const torch::Tensor& inputs) const;
  torch::Tensor grouped_experts(const torch::Tensor& inputs, const torch::Tensor& kept) const;
  torch::Tensor looped_experts(const torch::Tensor& inputs, const torch::Tensor& kept) const;

  config::Activation activation_;
  SublayerHooks hooks_;
  int64_t layer_ = 0, blocks_ = 1;  // blocks_: the model's, over which losses are averaged
  int64_t top_k_ = 0;
  bool norm_topk_ = false, dropless_ = true, lbl_in_fp32_ = false, loop_ = false, log_counts_ = false;
  double capacity_factor_ = 1.0;
  double load_balancing_weight_ = 0, z_loss_weight_ = 0;  // moe_loss_weight, moe_zloss_weight
  double bias_rate_ = 0;                                  // moe_router_bias_rate
  bool per_sequence_lb_ = false;                          // moe_lb_loss_granularity instance
};
TORCH_MODULE(MoeMlp);

// Refuses, before anything is built, a dropping config whose experts would keep no assignment
// of a `micro_batch`-sequence micro-batch (they would never train). Nothing for dense or
// dropless blocks.
void check_moe_capacity(const config::ModelConfig& m, int64_t micro_batch);

}  // namespace siamese::model
