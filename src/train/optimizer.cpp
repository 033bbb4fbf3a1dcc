#include "siamese/train/optimizer.h"

#include <algorithm>

#include "siamese/common/error.h"
#include "siamese/model/transformer.h"

namespace siamese::train {

ParamGroups param_groups(const OptimizerConfig& cfg,
                         const torch::OrderedDict<std::string, torch::Tensor>& params) {
  using model::ParamKind;
  ParamGroups g;
  for (const auto& item : params) {
    if (!item.value().requires_grad()) continue;
    bool decay = false;
    switch (model::param_kind(item.key())) {
      case ParamKind::Linear: decay = true; break;
      case ParamKind::Bias:
      case ParamKind::Norm: decay = cfg.decay_norm_and_bias; break;
      case ParamKind::Embedding: decay = cfg.decay_embeddings; break;
    }
    (decay ? g.decay : g.no_decay).push_back(item.key());
  }
  std::sort(g.decay.begin(), g.decay.end());
  std::sort(g.no_decay.begin(), g.no_decay.end());
  return g;
}

std::unique_ptr<torch::optim::AdamW> build_optimizer(
    const OptimizerConfig& cfg, const torch::OrderedDict<std::string, torch::Tensor>& params) {
  if (cfg.name != "adamw")
    throw Error("optimizer '" + cfg.name + "' is not implemented", "optimizer.name", "use adamw");
  if (cfg.betas.size() != 2)
    throw Error("betas needs two values", "optimizer.betas", "e.g. [0.9, 0.95]");
  auto options = [&](double weight_decay) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(cfg.learning_rate)
            .betas({cfg.betas[0], cfg.betas[1]})
            .eps(cfg.eps)
            .weight_decay(weight_decay));
  };
  const ParamGroups g = param_groups(cfg, params);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  auto tensors = [&](const std::vector<std::string>& names) {
    std::vector<torch::Tensor> out;
    for (const auto& n : names) out.push_back(params[n]);
    return out;
  };
  if (!g.decay.empty()) groups.emplace_back(tensors(g.decay), options(cfg.weight_decay));
  if (!g.no_decay.empty()) groups.emplace_back(tensors(g.no_decay), options(0.0));
  return std::make_unique<torch::optim::AdamW>(std::move(groups),
                                               torch::optim::AdamWOptions(cfg.learning_rate));
}

void set_learning_rate(torch::optim::Optimizer& optim, double lr) {
  for (auto& group : optim.param_groups()) group.options().set_lr(lr);
}

}  // namespace siamese::train
