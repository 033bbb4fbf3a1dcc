#include "siamese/analysis/grad_norms.h"

#include <cmath>
#include <regex>

#include "siamese/common/metrics_row.h"

namespace siamese::analysis {

std::vector<double> per_layer_grad_norms(model::TransformerImpl& model) {
  torch::NoGradGuard no_grad;
  const int64_t L = model.config().n_layers;
  std::vector<double> sq(L, 0.0);
  static const std::regex in_block("^(topology\\.)?blocks\\.([0-9]+)\\.");
  for (const auto& kv : model.named_parameters()) {
    const auto& g = kv.value().grad();
    if (!g.defined()) continue;
    std::smatch m;
    const std::string name = kv.key();
    if (!std::regex_search(name, m, in_block)) continue;
    const int64_t layer = std::stoll(m[2]);
    if (layer < L) sq[layer] += g.to(torch::kFloat64).pow(2).sum().item<double>();
  }
  for (auto& v : sq) v = std::sqrt(v);
  return sq;
}

MetricsRow layer_grad_norms_row(int64_t step, const std::vector<double>& norms) {
  return metrics_row(step, "", {{"layer_grad_norms", norms}});
}

}  // namespace siamese::analysis
