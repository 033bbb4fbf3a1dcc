#include "siamese/analysis/stream_mixing.h"

#include <fmt/format.h>

#include <algorithm>

#include "siamese/model/olmo_names.h"

namespace siamese::analysis {

StreamMixing stream_mixing(model::TransformerImpl& model) {
  torch::NoGradGuard no_grad;
  const auto params = model.named_parameters();
  auto find = [&](const std::string& name) -> torch::Tensor {
    const auto* p = params.find(name);
    return p ? p->to(torch::kFloat32) : torch::Tensor();
  };
  auto mean_abs = [](const torch::Tensor& t) { return t.abs().mean().item<double>(); };

  StreamMixing out;
  for (const auto& kv : params) {
    const auto p = model::parse_param_name(kv.key());
    if (p.owner != model::ParamName::Owner::Topology || !p.layer) continue;
    const std::string site = p.local == "attn_y_norm.weight" ? "attn"
                             : p.local == "ff_y_norm.weight" ? "ff"
                                                             : "";
    if (site.empty()) continue;
    const std::string block = fmt::format("topology.blocks.{}.", *p.layer);
    torch::Tensor x = torch::ones_like(kv.value(), torch::kFloat32);
    if (auto w = find(block + site + "_norm.weight"); w.defined()) x = x * w;
    if (auto c1 = find(block + "c1"); c1.defined() && site == "attn") x = x * c1;
    out.sites.push_back({*p.layer, site, mean_abs(x), mean_abs(kv.value().to(torch::kFloat32))});
  }
  std::sort(out.sites.begin(), out.sites.end(), [](const MixingSite& a, const MixingSite& b) {
    return a.layer != b.layer ? a.layer < b.layer : a.site < b.site;  // "attn" < "ff"
  });
  auto fx = find("topology.ln_f.weight"), fy = find("topology.ln_y_f.weight");
  if (fx.defined() && fy.defined()) {
    out.final_x = mean_abs(fx);
    out.final_y = mean_abs(fy);
  }
  return out;
}

}  // namespace siamese::analysis
