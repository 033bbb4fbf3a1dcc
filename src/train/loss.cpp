#include "siamese/train/loss.h"

namespace siamese::train {

torch::Tensor lm_loss_sum(model::TransformerImpl& model, const torch::Tensor& ids) {
  const int64_t T = ids.size(1);
  auto logits = model.forward(ids.narrow(1, 0, T - 1));
  auto labels = ids.narrow(1, 1, T - 1);
  return torch::nn::functional::cross_entropy(
      logits.reshape({-1, logits.size(-1)}).to(torch::kFloat32), labels.reshape({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
}

}  // namespace siamese::train
