#pragma once
// The language-modelling loss, in one place for training, evaluation, analyses, golden
// parity and benchmarks.
#include <torch/torch.h>

#include <functional>
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

// The logits of hidden states [rows, d]: the model's LM head (TransformerImpl::head).
using HeadFn = std::function<torch::Tensor(const torch::Tensor&)>;

// loss_sums(head(hidden), targets, z_loss_multiplier) for hidden [..., d], computed
// `chunk_tokens` rows at a time: no more than one chunk's logits exist at once, in forward
// and in backward. With gradients, the result's backward recomputes each chunk's logits and
// returns the gradients of `hidden` and of every parameter head() reads (found from head's
// autograd graph, so tied embeddings and a topology's logit scale are covered). Equal to the
// unchunked loss up to the order of summation.
LossSums chunked_loss_sums(const HeadFn& head, const torch::Tensor& hidden, const torch::Tensor& targets,
                           std::optional<double> z_loss_multiplier, int64_t chunk_tokens);

// The loss_sums of the model's LM head over hidden [..., d]: chunked_loss_sums when the
// model's config sets fused_loss, else loss_sums(model.head(hidden), ...). The one entry for
// training, evaluation and perplexity.
LossSums head_loss_sums(TransformerImpl& model, const torch::Tensor& hidden, const torch::Tensor& targets,
                        std::optional<double> z_loss_multiplier = std::nullopt);

// Sum over positions of -log softmax(logits)[target]: loss_sums(...).nll.
torch::Tensor nll_sum(const torch::Tensor& logits, const torch::Tensor& targets);

// Next-token loss of logits [B, T, V] for ids [B, T]: positions 0..T-2 against ids
// 1..T-1, so B*(T-1) predicted tokens. The sum; divide by the predicted count for the mean.
torch::Tensor next_token_nll_sum(const torch::Tensor& logits, const torch::Tensor& ids);

// The next-token loss_sums of the model over ids [B, T] through head_loss_sums (the last
// position's logits, which predict nothing, are never computed). With `documents` (training
// on packed rows), attention stays within the documents of ids[:, :T-1]. `aux` goes to the
// forward (ForwardOptions::aux).
LossSums lm_loss_sums(TransformerImpl& model, const torch::Tensor& ids,
                      std::optional<double> z_loss_multiplier = std::nullopt,
                      const std::optional<DocumentRule>& documents = std::nullopt, AuxLosses* aux = nullptr);

// lm_loss_sums(model, ids).nll.
torch::Tensor lm_loss_sum(TransformerImpl& model, const torch::Tensor& ids);

}  // namespace siamese::model
