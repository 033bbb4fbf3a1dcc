#pragma once
// The language-modelling loss, in one place for training, evaluation, analyses, golden
// parity and benchmarks.
#include <torch/torch.h>

#include <optional>

#include "siamese/model/documents.h"
#include "siamese/model/transformer.h"

namespace siamese::model {

// A loss as sums over predicted tokens (divide by their count for the means): the
// cross-entropy, and OLMo's z-loss (olmo/train.py cross_entropy_loss), multiplier *
// logsumexp(logits)^2, which pulls the softmax normaliser towards 1. `z` is undefined when
// the z-loss is off.
struct LossSums {
  torch::Tensor nll;
  torch::Tensor z;
  // What training differentiates: nll + z.
  torch::Tensor total() const { return z.defined() ? nll + z : nll; }
};

// loss_sums of logits [..., V] against targets [...], with the z-loss when a multiplier is
// given. Computed in float32 for half-precision logits (autocast), in float64 for float64 ones.
LossSums loss_sums(const torch::Tensor& logits, const torch::Tensor& targets,
                   std::optional<double> z_loss_multiplier = std::nullopt);

// Sum over positions of -log softmax(logits)[target]: loss_sums(...).nll.
torch::Tensor nll_sum(const torch::Tensor& logits, const torch::Tensor& targets);

// Next-token loss of logits [B, T, V] for ids [B, T]: positions 0..T-2 against ids
// 1..T-1, so B*(T-1) predicted tokens. The sum; divide by the predicted count for the mean.
torch::Tensor next_token_nll_sum(const torch::Tensor& logits, const torch::Tensor& ids);

// The next-token loss_sums of the model's forward over ids [B, T] (the last position's
// logits, which predict nothing, are never computed). With `documents` (training on packed
// rows), attention stays within the documents of ids[:, :T-1].
LossSums lm_loss_sums(TransformerImpl& model, const torch::Tensor& ids,
                      std::optional<double> z_loss_multiplier = std::nullopt,
                      const std::optional<DocumentRule>& documents = std::nullopt);

// lm_loss_sums(model, ids).nll.
torch::Tensor lm_loss_sum(TransformerImpl& model, const torch::Tensor& ids);

}  // namespace siamese::model
