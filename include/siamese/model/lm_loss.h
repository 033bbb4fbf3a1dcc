#pragma once
// The language-modelling loss, in one place for training, evaluation, analyses, golden
// parity and benchmarks.
#include <torch/torch.h>

#include "siamese/model/transformer.h"

namespace siamese::model {

// Sum over positions of -log softmax(logits)[target]: logits [..., V], targets [...].
// Computed in float32 for half-precision logits (autocast), in float64 for float64 ones.
torch::Tensor nll_sum(const torch::Tensor& logits, const torch::Tensor& targets);

// Next-token loss of logits [B, T, V] for ids [B, T]: positions 0..T-2 against ids
// 1..T-1, so B*(T-1) predicted tokens. The sum; divide by the predicted count for the mean.
torch::Tensor next_token_nll_sum(const torch::Tensor& logits, const torch::Tensor& ids);

// next_token_nll_sum of the model's forward over ids [B, T] (the last position's logits,
// which predict nothing, are never computed).
torch::Tensor lm_loss_sum(TransformerImpl& model, const torch::Tensor& ids);

}  // namespace siamese::model
