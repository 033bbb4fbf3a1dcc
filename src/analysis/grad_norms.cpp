#include "siamese/analysis/grad_norms.h"

#include <cmath>
#include "siamese/common/metrics_row.h"
#include "siamese/model/olmo_names.h"

namespace siamese::analysis {

std::vector<double> per_layer_grad_norms(model::TransformerImpl& model) {
  dist::WholeLayout whole;
  return per_layer_grad_norms(model.named_parameters(), model.config().n_layers, whole);
}

std::vector<double> per_layer_grad_norms(const torch::OrderedDict<std::string, torch::Tensor>& named,
                                         int64_t n_layers, dist::ShardLayout& layout) {
  torch::NoGradGuard no_grad;
  const auto device = named.is_empty() ? torch::Device(torch::kCPU) : named[0].value().device();
  auto sq = torch::zeros({n_layers}, torch::dtype(torch::kFloat64).device(device));
  for (const auto& kv : named) {
    const auto& g = kv.value().grad();
    const auto layer = model::parse_param_name(kv.key()).layer;
    if (g.defined() && layer && *layer < n_layers) sq[*layer] += g.to(torch::kFloat64).pow(2).sum();
  }
  layout.sum_shards_(sq);
  const auto host = sq.sqrt().cpu();
  return std::vector<double>(host.data_ptr<double>(), host.data_ptr<double>() + n_layers);
}

MetricsRow layer_grad_norms_row(int64_t step, const std::vector<double>& norms) {
  return metrics_row(step, "", {{"layer_grad_norms", norms}});
}

}  // namespace siamese::analysis
