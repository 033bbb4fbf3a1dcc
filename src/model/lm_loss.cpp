#include "siamese/model/lm_loss.h"

namespace siamese::model {

LossSums loss_sums(const torch::Tensor& logits, const torch::Tensor& targets,
                   std::optional<double> z_loss_multiplier) {
  const auto wide = logits.scalar_type() == torch::kFloat64 ? logits : logits.to(torch::kFloat32);
  const auto rows = wide.reshape({-1, wide.size(-1)});
  LossSums sums;
  sums.nll = torch::nn::functional::cross_entropy(
      rows, targets.reshape({-1}), torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
  if (z_loss_multiplier) sums.z = *z_loss_multiplier * rows.logsumexp(-1).pow(2).sum();
  return sums;
}

LossSums head_loss_sums(TransformerImpl& model, const torch::Tensor& hidden, const torch::Tensor& targets,
                        std::optional<double> z_loss_multiplier) {
  const auto& c = model.config();
  if (!c.fused_loss.value_or(false)) return loss_sums(model.head(hidden), targets, z_loss_multiplier);
  // The backward keeps this function: the model outlives every backward of its losses.
  return chunked_loss_sums([&model](const torch::Tensor& h) { return model.head(h); }, hidden, targets,
                           z_loss_multiplier, c.fused_loss_chunk_tokens);
}

torch::Tensor nll_sum(const torch::Tensor& logits, const torch::Tensor& targets) {
  return loss_sums(logits, targets).nll;
}

torch::Tensor next_token_nll_sum(const torch::Tensor& logits, const torch::Tensor& ids) {
  const int64_t T = ids.size(1);
  return nll_sum(logits.slice(1, 0, T - 1), ids.slice(1, 1, T));
}

LossSums lm_loss_sums(TransformerImpl& model, const torch::Tensor& ids,
                      std::optional<double> z_loss_multiplier, const std::optional<DocumentRule>& documents) {
  const int64_t T = ids.size(1);
  const auto input = ids.narrow(1, 0, T - 1), targets = ids.narrow(1, 1, T - 1);
  ForwardOptions opts;
  std::optional<Documents> docs;
  if (documents) {
    docs = find_documents(input, documents->eos_id, documents->restart_positions);
    opts.documents = &*docs;
  }
  return head_loss_sums(model, model.hidden(input, opts), targets, z_loss_multiplier);
}

torch::Tensor lm_loss_sum(TransformerImpl& model, const torch::Tensor& ids) {
  return lm_loss_sums(model, ids).nll;
}

}  // namespace siamese::model
