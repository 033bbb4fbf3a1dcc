#include "siamese/analysis/depth_mixing.h"

namespace siamese::analysis {

std::vector<DepthMixingEntry> depth_mixing(model::TransformerImpl& model,
                                           const std::vector<torch::Tensor>& batches) {
  torch::NoGradGuard no_grad;
  std::vector<DepthMixingEntry> out;
  int64_t tokens = 0;
  size_t next = 0;  // entry of the current batch's next report
  model::Probe probe = [&](int64_t layer, const std::string& key, const torch::Tensor& w) {
    const auto dot = key.find('.');
    auto sum = w.to(torch::kFloat64).flatten(0, 1).sum(0).cpu();
    if (next == out.size())
      out.push_back({layer, key.substr(0, dot), key.substr(dot + 1), torch::zeros_like(sum)});
    auto& e = out[next++];
    TORCH_CHECK(e.layer == layer && key == e.site + "." + e.name && e.mean.sizes() == sum.sizes(),
                "mixing weights differ between batches at ", key, " of layer ", layer);
    e.mean += sum;
  };
  model::ForwardOptions opts;
  opts.mixing_probe = &probe;
  for (const auto& ids : batches) {
    next = 0;
    model.hidden(ids, opts);
    tokens += ids.numel();
  }
  for (auto& e : out) e.mean /= double(tokens);
  return out;
}

}  // namespace siamese::analysis
