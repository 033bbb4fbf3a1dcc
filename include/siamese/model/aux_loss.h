#pragma once
// Auxiliary losses a block computes beside its output (OLMoE's load-balancing and router
// z-losses). The block attaches them to its output through autograd, as OLMo-core's MoE
// blocks do: forward passes the output on unchanged; backward gives the loss the gradient
// the training loss would. Nobody carries the losses out of the block, so a checkpointed
// block recomputes them with the rest, and the training loss needs no term for them.
#include <torch/torch.h>

#include <utility>

#include "siamese/model/step_values.h"

namespace siamese::model {

// Handed to a forward (ForwardOptions::aux): what the blocks' auxiliary losses back-propagate,
// and where the blocks leave their values for the step's record.
struct AuxLosses {
  AuxLosses() = default;
  explicit AuxLosses(torch::Tensor scale, double batch_share = 1.0)
      : grad_scale(std::move(scale)), share(batch_share) {}

  // d(training loss) / d(a loss as its block weighs it): the micro-batch's share of the
  // global batch times the loss scale, a scalar on the device. Undefined: nothing attached.
  torch::Tensor grad_scale;
  // The micro-batch's share of the global batch: a block weighs the loss values it reports
  // by it, so that their sum over micro-batches and ranks is their mean.
  double share = 1.0;
  // What the blocks measured (their losses unweighted, the mean over blocks; MoE's routing),
  // detached, by the metrics row's key.
  StepValues values;
};

// `activation` itself (a view of it); backward passes activation's gradient through and
// gives `loss` (a scalar) the gradient `grad_scale`.
torch::Tensor attach_aux_loss(const torch::Tensor& activation, const torch::Tensor& loss,
                              const torch::Tensor& grad_scale);

}  // namespace siamese::model
