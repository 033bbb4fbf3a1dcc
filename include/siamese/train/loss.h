#pragma once
// The language-modelling loss, in one place for training, evaluation and benchmarks.
#include <torch/torch.h>

#include "siamese/model/transformer.h"

namespace siamese::train {

// Sum of next-token cross-entropies over ids [B, T]: logits at positions 0..T-2 against
// ids 1..T-1, so B*(T-1) predicted tokens. Returned as an fp32 scalar.
torch::Tensor lm_loss_sum(model::TransformerImpl& model, const torch::Tensor& ids);

}  // namespace siamese::train
