#include "siamese/analysis/stream_stats.h"

#include "siamese/model/attention.h"

namespace siamese::analysis {
namespace {

torch::Tensor rms(const torch::Tensor& t) { return t.to(torch::kFloat).square().mean(-1).sqrt().mean(); }

}  // namespace

StreamStats stream_stats(model::TransformerImpl& model, const torch::Tensor& batch) {
  torch::NoGradGuard no_grad;
  const bool training = model.is_training();
  model.eval();
  const int64_t L = model.config().n_layers;
  // Device scalars first, read once at the end.
  std::map<std::string, std::vector<torch::Tensor>> streams, sublayers, mixing;
  torch::Tensor final_rms;
  std::vector<torch::Tensor> logits(L);
  const model::Probe probe = [&](int64_t layer, const std::string& stream, const torch::Tensor& t) {
    if (stream == "final" && layer == L) {
      final_rms = rms(t);
      return;
    }
    auto& v = streams[stream];
    if (v.empty()) v.resize(L + 1);
    v[layer + 1] = rms(t);
  };
  const model::Probe sublayer = [&](int64_t layer, const std::string& site, const torch::Tensor& t) {
    if (site == "attn_in") logits[layer] = model.blocks[layer]->as<model::BlockImpl>()->attn->max_logit(t);
    if (site != "attn_out" && site != "ffn_out") return;
    auto& v = sublayers[site == "attn_out" ? "attn" : "ffn"];
    if (v.empty()) v.resize(L);
    v[layer] = rms(t);
  };
  const model::Probe mixed = [&](int64_t layer, const std::string& name, const torch::Tensor& w) {
    if (layer >= L) return;
    auto& v = mixing[name];
    if (v.empty()) v.resize(L);
    // [B, T, ...] -> the weights per token position averaged: what a layer mixes with.
    v[layer] = w.to(torch::kFloat).reshape({w.size(0) * w.size(1), -1}).mean(0);
  };
  model::ForwardOptions opts;
  opts.probe = &probe;
  opts.sublayer_probe = &sublayer;
  opts.mixing_probe = &mixed;
  model.hidden(batch, opts);
  model.train(training);

  auto host = [](const std::vector<torch::Tensor>& v) {
    std::vector<double> out;
    for (const auto& t : v) out.push_back(t.defined() ? t.item<double>() : 0.0);
    return out;
  };
  StreamStats out;
  for (const auto& [name, v] : streams) out.stream_rms[name] = host(v);
  for (const auto& [name, v] : sublayers) out.sublayer_rms[name] = host(v);
  out.final_rms = final_rms.defined() ? final_rms.item<double>() : 0.0;
  out.max_attn_logit = host(logits);
  for (const auto& [name, v] : mixing)
    for (const auto& t : v) {
      const auto cpu =
          t.defined() ? t.to(torch::kDouble).cpu().contiguous() : torch::zeros({0}, torch::kDouble);
      out.mixing[name].emplace_back(cpu.data_ptr<double>(), cpu.data_ptr<double>() + cpu.numel());
    }
  return out;
}

}  // namespace siamese::analysis
