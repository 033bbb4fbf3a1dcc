#pragma once
// Auxiliary losses a block computes beside its output (OLMoE's load-balancing and router
// z-losses). The block attaches them to its output through autograd, as OLMo-core's MoE
// blocks do: forward passes the output on unchanged; backward gives the loss the gradient
// the training loss would. Nobody carries the losses out of the block, so a checkpointed
// block recomputes them with the rest, and the training loss needs no term for them.
#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

namespace siamese::model {

// How one block routed a forward's tokens (block_type moe).
struct ExpertLoad {
  std::vector<int64_t> tokens_per_expert;  // assignments per expert, before dropping
  int64_t assignments = 0;                 // tokens * top_k
  int64_t dropped = 0;                     // assignments over an expert's capacity
};

// Handed to a forward (ForwardOptions::aux): what the blocks' auxiliary losses back-propagate,
// and what they leave for the metrics.
struct AuxLosses {
  AuxLosses() = default;
  explicit AuxLosses(torch::Tensor scale) : grad_scale(std::move(scale)) {}

  // d(training loss) / d(a loss as its block weighs it): the micro-batch's share of the
  // global batch times the loss scale, a scalar on the device. Undefined: nothing attached.
  torch::Tensor grad_scale;
  // Each loss as the metrics report it (unweighted, the mean over blocks), detached, by the
  // metrics row's key.
  std::vector<std::pair<std::string, torch::Tensor>> terms;
  std::vector<ExpertLoad> routing;  // per block, in order

  // Sums `value` into the term `name`.
  void add(const std::string& name, const torch::Tensor& value);
  // The term `name`; undefined when no block added it.
  torch::Tensor term(const std::string& name) const;
};

// `activation` itself (a view of it); backward passes activation's gradient through and
// gives `loss` (a scalar) the gradient `grad_scale`.
torch::Tensor attach_aux_loss(const torch::Tensor& activation, const torch::Tensor& loss,
                              const torch::Tensor& grad_scale);

}  // namespace siamese::model
