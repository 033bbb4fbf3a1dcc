#include "siamese/analysis/grad_norms.h"

#include <cmath>
#include "siamese/common/metrics_row.h"
#include "siamese/model/olmo_names.h"

namespace siamese::analysis {

std::vector<double> per_layer_grad_norms(model::TransformerImpl& model) {
  torch::NoGradGuard no_grad;
  const int64_t L = model.config().n_layers;
  std::vector<double> sq(L, 0.0);
  for (const auto& kv : model.named_parameters()) {
    const auto& g = kv.value().grad();
    const auto layer = model::parse_param_name(kv.key()).layer;
    if (g.defined() && layer && *layer < L) sq[*layer] += g.to(torch::kFloat64).pow(2).sum().item<double>();
  }
  for (auto& v : sq) v = std::sqrt(v);
  return sq;
}

MetricsRow layer_grad_norms_row(int64_t step, const std::vector<double>& norms) {
  return metrics_row(step, "", {{"layer_grad_norms", norms}});
}

}  // namespace siamese::analysis
