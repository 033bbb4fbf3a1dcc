#include "siamese/analysis/effective_depth.h"

#include <cmath>

#include "siamese/model/lm_loss.h"

namespace siamese::analysis {

double lm_loss(model::TransformerImpl& model, const std::vector<torch::Tensor>& batches, int64_t n_blocks) {
  torch::NoGradGuard no_grad;
  model::ForwardOptions opts;
  opts.n_blocks = n_blocks;
  double sum = 0;
  int64_t count = 0;
  for (const auto& ids : batches) {
    auto h = model.hidden(ids, opts);
    // One sequence at a time through the head keeps the [T, vocab] logits small.
    for (int64_t b = 0; b < ids.size(0); ++b) {
      sum += model::head_loss_sums(model, h[b].slice(0, 0, -1), ids[b].slice(0, 1)).nll.item<double>();
      count += ids.size(1) - 1;
    }
  }
  return sum / double(count);
}

std::vector<DepthPoint> effective_depth(model::TransformerImpl& model,
                                        const std::vector<torch::Tensor>& batches) {
  const int64_t L = model.config().n_layers;
  std::vector<DepthPoint> out;
  for (int64_t k = 0; k <= L / 2; ++k) {
    const double loss = lm_loss(model, batches, L - k);
    out.push_back({k, loss, std::exp(loss)});
  }
  return out;
}

}  // namespace siamese::analysis
