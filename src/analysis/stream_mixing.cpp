#include "siamese/analysis/stream_mixing.h"

#include <algorithm>
#include <map>
#include <regex>

#include "siamese/model/olmo_names.h"

namespace siamese::analysis {

StreamMixing stream_mixing(model::TransformerImpl& model) {
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> params;
  for (const auto& [key, value] : model::olmo_state(model)) params[key] = value;
  auto find = [&](const std::string& key) -> torch::Tensor {
    auto it = params.find("transformer." + key);
    return it == params.end() ? torch::Tensor() : it->second.to(torch::kFloat32);
  };
  auto mean_abs = [](const torch::Tensor& t) { return t.abs().mean().item<double>(); };

  StreamMixing out;
  static const std::regex y_site("transformer\\.blocks\\.([0-9]+)\\.(attn|ff)_y_norm\\.weight");
  for (const auto& [key, y] : params) {
    std::smatch m;
    if (!std::regex_match(key, m, y_site)) continue;
    const std::string block = "blocks." + m[1].str() + ".";
    const std::string site = m[2];
    torch::Tensor x = torch::ones_like(y, torch::kFloat32);
    if (auto w = find(block + site + "_norm.weight"); w.defined()) x = x * w;
    if (auto c1 = find(block + "c1"); c1.defined() && site == "attn") x = x * c1;
    out.sites.push_back({std::stoll(m[1]), site, mean_abs(x), mean_abs(y.to(torch::kFloat32))});
  }
  std::sort(out.sites.begin(), out.sites.end(), [](const MixingSite& a, const MixingSite& b) {
    return a.layer != b.layer ? a.layer < b.layer : a.site < b.site;  // "attn" < "ff"
  });
  auto fx = find("ln_f.weight"), fy = find("ln_y_f.weight");
  if (fx.defined() && fy.defined()) {
    out.final_x = mean_abs(fx);
    out.final_y = mean_abs(fy);
  }
  return out;
}

}  // namespace siamese::analysis
