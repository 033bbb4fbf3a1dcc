#include "siamese/model/lm_loss.h"

namespace siamese::model {

torch::Tensor nll_sum(const torch::Tensor& logits, const torch::Tensor& targets) {
  const auto wide = logits.scalar_type() == torch::kFloat64 ? logits : logits.to(torch::kFloat32);
  return torch::nn::functional::cross_entropy(
      wide.reshape({-1, wide.size(-1)}), targets.reshape({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
}

torch::Tensor next_token_nll_sum(const torch::Tensor& logits, const torch::Tensor& ids) {
  const int64_t T = ids.size(1);
  return nll_sum(logits.slice(1, 0, T - 1), ids.slice(1, 1, T));
}

torch::Tensor lm_loss_sum(TransformerImpl& model, const torch::Tensor& ids) {
  const int64_t T = ids.size(1);
  return nll_sum(model.forward(ids.narrow(1, 0, T - 1)), ids.narrow(1, 1, T - 1));
}

}  // namespace siamese::model
