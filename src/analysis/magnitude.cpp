#include "siamese/analysis/magnitude.h"

namespace siamese::analysis {

StreamMagnitudes stream_magnitudes(model::TransformerImpl& model, const std::vector<torch::Tensor>& batches) {
  torch::NoGradGuard no_grad;
  const int64_t L = model.config().n_layers;
  StreamMagnitudes out;
  model::Probe probe = [&](int64_t layer, const std::string& stream, const torch::Tensor& t) {
    const double m = t.to(torch::kFloat32).pow(2).sum(-1).sqrt().mean().item<double>() / batches.size();
    if (stream == "final" && layer == L) {
      out.final_norm += m;
      return;
    }
    auto& v = out.by_stream[stream];
    if (v.empty()) v.assign(L + 1, 0.0);
    v[layer + 1] += m;
  };
  model::ForwardOptions opts;
  opts.probe = &probe;
  for (const auto& ids : batches) model.hidden(ids, opts);
  return out;
}

}  // namespace siamese::analysis
