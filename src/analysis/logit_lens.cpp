#include "siamese/analysis/logit_lens.h"

namespace siamese::analysis {

LogitLens logit_lens(model::TransformerImpl& model, const std::vector<torch::Tensor>& batches) {
  torch::NoGradGuard no_grad;
  const int64_t L = model.config().n_layers;
  LogitLens out;
  std::map<std::string, int64_t> agree, agree_dis;
  std::vector<std::string> names;
  for (const auto& ids : batches) {
    model::State last;
    model::Probe probe = [&](int64_t layer, const std::string& stream, const torch::Tensor& t) {
      if (layer == L - 1) {
        last.names.push_back(stream);
        last.streams.push_back(t);
      }
    };
    model::ForwardOptions opts;
    opts.probe = &probe;
    const auto final_pred = model.head(model.hidden(ids, opts)).argmax(-1);
    names = last.names;
    std::vector<torch::Tensor> preds;
    for (size_t i = 0; i < last.streams.size(); ++i) {
      model::State own = last;
      for (size_t j = 0; j < own.streams.size(); ++j)
        if (j != i) own.streams[j] = torch::zeros_like(own.streams[j]);
      preds.push_back(model.head(model.topology().finish(own)).argmax(-1));
    }
    auto disagree = torch::zeros_like(final_pred, torch::kBool);
    for (size_t i = 1; i < preds.size(); ++i) disagree = disagree.logical_or(preds[i] != preds[0]);
    out.positions += final_pred.numel();
    out.disagreeing += disagree.sum().item<int64_t>();
    for (size_t i = 0; i < preds.size(); ++i) {
      auto match = preds[i] == final_pred;
      agree[names[i]] += match.sum().item<int64_t>();
      agree_dis[names[i]] += match.logical_and(disagree).sum().item<int64_t>();
    }
  }
  for (const auto& n : names) {
    out.agreement[n] = double(agree[n]) / double(std::max<int64_t>(1, out.positions));
    out.agreement_where_disagree[n] = out.disagreeing ? double(agree_dis[n]) / double(out.disagreeing) : 0.0;
  }
  return out;
}

}  // namespace siamese::analysis
