#include "siamese/train/optimizer.h"
#include "siamese/model/accounting.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "siamese/common/error.h"
#include "siamese/model/olmo_names.h"
#include "siamese/model/transformer.h"

namespace siamese::train {

namespace {

// A parameter's settings before the overrides: its OLMo group, the topology's, or Muon's.
ParamGroup standard_group(const config::OptimizerConfig& cfg, const std::string& name,
                          const torch::Tensor& p) {
  using model::ParamKind;
  ParamGroup g;
  g.beta1 = cfg.betas[0];
  g.beta2 = cfg.betas[1];
  g.eps = cfg.eps;
  const ParamKind kind = model::param_kind(name);
  // Muon's matrices are the hidden layers' (MoE experts' stacks and routers included): the
  // LM head (untied; tied, it is the embedding) maps to the vocabulary and stays with
  // AdamW, as in Keller Jordan's setup.
  if (cfg.name == config::OptimizerName::Muon && kind == ParamKind::Linear && p.dim() >= 2 &&
      model::parse_param_name(name).owner != model::ParamName::Owner::Head) {
    g.label = "muon";
    g.muon = true;
    g.lr_ratio = cfg.muon.learning_rate.value_or(cfg.learning_rate) / cfg.learning_rate;
    g.weight_decay = cfg.muon.weight_decay.value_or(cfg.weight_decay);
    return g;
  }
  if (model::is_topology_tensor(name)) {
    g.label = "topology";
    g.lr_ratio = cfg.topology_lr_multiplier;
    g.weight_decay = cfg.topology_weight_decay;
    return g;
  }
  bool decay = false;
  switch (kind) {
    case ParamKind::Linear:
      decay = true;
      break;
    case ParamKind::Bias:
    case ParamKind::Norm:
      decay = cfg.decay_norm_and_bias;
      break;
    case ParamKind::Embedding:
      decay = cfg.decay_embeddings;
      break;
  }
  g.label = decay ? "decay" : "no_decay";
  g.weight_decay = decay ? cfg.weight_decay : 0.0;
  return g;
}

// The standard group with the parametrization's factors (model/parametrization.h).
ParamGroup default_group(const config::OptimizerConfig& cfg, const std::string& name, const torch::Tensor& p,
                         const model::Parametrization* shape) {
  ParamGroup g = standard_group(cfg, name, p);
  if (!shape || shape->standard()) return g;
  const model::OptimizerScale s =
      shape->optimizer(name, p, g.muon, cfg.muon.adjust_lr == config::MuonLrAdjust::MatchRmsAdamW);
  if (s.lr == 1.0 && s.eps == 1.0) return g;
  if (!g.muon) g.label = s.eps != 1.0 ? "hidden" : "vector";
  g.lr_ratio *= s.lr;
  g.weight_decay *= s.weight_decay;
  g.eps *= s.eps;
  return g;
}

void apply_override(const config::OptimizerConfig& cfg, const config::GroupOverrideConfig& o, size_t index,
                    ParamGroup& g) {
  g.label = "group_overrides[" + std::to_string(index) + "]";
  if (o.lr) g.lr_ratio = *o.lr / cfg.learning_rate;
  if (o.lr_multiplier) g.lr_ratio *= *o.lr_multiplier;
  if (o.weight_decay) g.weight_decay = *o.weight_decay;
  if (o.weight_decay_multiplier) g.weight_decay *= *o.weight_decay_multiplier;
  if (!o.betas.empty()) {
    g.beta1 = o.betas[0];
    g.beta2 = o.betas[1];
  }
  if (o.eps) g.eps = *o.eps;
}

bool same_settings(const ParamGroup& a, const ParamGroup& b) {
  return a.label == b.label && a.muon == b.muon && a.lr_ratio == b.lr_ratio &&
         a.weight_decay == b.weight_decay && a.beta1 == b.beta1 && a.beta2 == b.beta2 && a.eps == b.eps;
}

}  // namespace

std::vector<std::string> ParamGroups::names(const std::string& label) const {
  std::vector<std::string> out;
  for (const auto& g : groups)
    if (g.label == label) out.insert(out.end(), g.names.begin(), g.names.end());
  std::sort(out.begin(), out.end());
  return out;
}

ParamGroups param_groups(const config::OptimizerConfig& cfg,
                         const torch::OrderedDict<std::string, torch::Tensor>& params,
                         const model::Parametrization* shape) {
  // Which override takes each parameter; globs follow Python's fnmatch (OLMo-core's), where
  // * also matches dots: fnmatch(3) without FNM_PATHNAME.
  std::map<std::string, size_t> taken;
  for (size_t i = 0; i < cfg.group_overrides.size(); ++i) {
    const std::string key = "optimizer.group_overrides[" + std::to_string(i) + "].params";
    for (const auto& pattern : cfg.group_overrides[i].params) {
      int matches = 0;
      for (const auto& item : params) {
        if (!item.value().requires_grad() || ::fnmatch(pattern.c_str(), item.key().c_str(), 0) != 0) continue;
        ++matches;
        if (standard_group(cfg, item.key(), item.value()).muon)
          throw Error("'" + pattern + "' matches " + item.key() + ", one of Muon's matrices", key,
                      "narrow the pattern to AdamW's parameters (embeddings, the head, norms, biases, the "
                      "topology's tensors); Muon's matrices take optimizer.muon.*");
        const auto [at, fresh] = taken.emplace(item.key(), i);
        if (!fresh && at->second != i)
          throw Error(fmt::format("{} is matched by optimizer.group_overrides[{}] and [{}]", item.key(),
                                  at->second, i),
                      key, "let one override name each parameter");
      }
      if (matches == 0)
        throw Error("'" + pattern + "' matches no parameter", key,
                    "use a name or glob from the groups the trainer logs at start (run.json's param_groups), "
                    "e.g. wte.weight or topology.blocks.*");
    }
  }
  ParamGroups out;
  for (const auto& item : params) {
    if (!item.value().requires_grad()) continue;
    ParamGroup g = default_group(cfg, item.key(), item.value(), shape);
    if (const auto it = taken.find(item.key()); it != taken.end())
      apply_override(cfg, cfg.group_overrides[it->second], it->second, g);
    const auto same = std::find_if(out.groups.begin(), out.groups.end(),
                                   [&](const ParamGroup& have) { return same_settings(have, g); });
    if (same != out.groups.end()) {
      same->names.push_back(item.key());
    } else {
      g.names = {item.key()};
      out.groups.push_back(std::move(g));
    }
  }
  // OLMo's order: decayed, not decayed; then ours, then the overrides in config order.
  const auto rank = [](const ParamGroup& g) -> int64_t {
    if (g.label == "decay") return -4;
    if (g.label == "no_decay") return -3;
    if (g.label == "topology") return -2;
    if (g.label == "hidden") return -1;
    if (g.label == "vector") return 0;
    if (g.muon) return std::numeric_limits<int64_t>::max();
    return 1 + std::stoll(g.label.substr(g.label.find('[') + 1));  // group_overrides[i]
  };
  std::stable_sort(out.groups.begin(), out.groups.end(),
                   [&](const ParamGroup& a, const ParamGroup& b) { return rank(a) < rank(b); });
  for (auto& g : out.groups) std::sort(g.names.begin(), g.names.end());
  return out;
}

std::vector<std::string> describe_groups(const ParamGroups& g, double learning_rate) {
  std::vector<std::string> lines;
  for (const auto& group : g.groups) {
    const size_t shown = std::min<size_t>(group.names.size(), 3);
    std::vector<std::string> names(group.names.begin(), group.names.begin() + shown);
    const std::string more =
        group.names.size() > shown ? fmt::format(", +{}", group.names.size() - shown) : "";
    lines.push_back(fmt::format(
        "optimizer group {} ({}): {} tensors, lr {:.4g}, weight_decay {:.4g}{} ({}{})", group.label,
        group.muon ? "muon" : "adamw", group.names.size(), learning_rate * group.lr_ratio, group.weight_decay,
        group.muon ? ""
                   : fmt::format(", betas [{:.4g}, {:.4g}], eps {:.4g}", group.beta1, group.beta2, group.eps),
        fmt::join(names, ", "), more));
  }
  return lines;
}

nlohmann::json groups_json(const ParamGroups& g, double learning_rate) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& group : g.groups) {
    nlohmann::json one = {{"label", group.label},
                          {"optimizer", group.muon ? "muon" : "adamw"},
                          {"lr", learning_rate * group.lr_ratio},
                          {"weight_decay", group.weight_decay}};
    if (!group.muon) {
      one["betas"] = {group.beta1, group.beta2};
      one["eps"] = group.eps;
    }
    one["params"] = group.names;
    out.push_back(std::move(one));
  }
  return out;
}

Optimizer::Optimizer(const config::OptimizerConfig& cfg,
                     const torch::OrderedDict<std::string, torch::Tensor>& params, const WholeParamsOf* whole,
                     const model::Parametrization* shape) {
  if (cfg.betas.size() != 2) throw Error("betas needs two values", "optimizer.betas", "e.g. [0.9, 0.95]");
  groups_ = param_groups(cfg, whole ? whole->params : params, shape);
  auto tensors = [&](const std::vector<std::string>& names) {
    std::vector<torch::Tensor> out;
    for (const auto& n : names) out.push_back(params[n]);
    return out;
  };
  std::vector<torch::optim::OptimizerParamGroup> adam_groups;
  std::vector<std::string> muon_names;
  const ParamGroup* muon_group = nullptr;  // one: overrides never take Muon's matrices
  for (const auto& g : groups_.groups) {
    if (g.muon) {
      muon_names.insert(muon_names.end(), g.names.begin(), g.names.end());
      muon_group = &g;
      continue;
    }
    adam_groups.emplace_back(tensors(g.names), std::make_unique<torch::optim::AdamWOptions>(
                                                   torch::optim::AdamWOptions(cfg.learning_rate * g.lr_ratio)
                                                       .betas({g.beta1, g.beta2})
                                                       .eps(g.eps)
                                                       .weight_decay(g.weight_decay)));
    adamw_lr_ratios_.push_back(g.lr_ratio);
  }
  adamw_ = std::make_unique<AdamW>(std::move(adam_groups), torch::optim::AdamWOptions(cfg.learning_rate));
  if (!muon_names.empty()) {
    const config::MuonConfig& m = cfg.muon;
    MuonOptions o;
    o.lr = cfg.learning_rate * muon_group->lr_ratio;
    o.weight_decay = muon_group->weight_decay;
    o.momentum = m.momentum;
    o.nesterov = m.nesterov;
    o.ns_steps = m.ns_steps;
    o.adjust_lr = m.adjust_lr;
    muon_lr_ratio_ = o.lr / cfg.learning_rate;
    std::vector<std::vector<int64_t>> shapes;
    for (const auto& n : muon_names) shapes.push_back((whole ? whole->params[n] : params[n]).sizes().vec());
    muon_ =
        std::make_unique<Muon>(tensors(muon_names), o, std::move(shapes), whole ? whole->layout : nullptr);
  }
  for (const auto& item : params)
    if (item.value().requires_grad()) {
      named_.insert(item.key(), item.value());
      params_.push_back(item.value());
    }
}

void Optimizer::allocate_state() {
  for (const auto& p : params_)
    if (!muon_ || !muon_->owns(p)) adamw_->state_of(p);
}

int64_t Optimizer::state_bytes() {
  int64_t bytes = 0;
  for (const auto& [impl, state] : adamw_->state()) {
    const auto& s = static_cast<const AdamWState&>(*state);
    bytes += s.exp_avg().nbytes() + s.exp_avg_sq().nbytes() + s.step_count.nbytes();
  }
  if (muon_)
    for (const auto& p : muon_->params())
      if (const torch::Tensor& b = muon_->momentum_buffer(p); b.defined()) bytes += b.nbytes();
  return bytes;
}

void Optimizer::zero_grad() {
  for (auto& p : params_) p.mutable_grad().reset();
}

void Optimizer::zero_grad_in_place() {
  std::vector<torch::Tensor> grads;
  for (const auto& p : params_)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (!grads.empty()) at::_foreach_zero_(grads);
}

void Optimizer::set_learning_rate(double lr) {
  auto& groups = adamw_->param_groups();
  for (size_t i = 0; i < groups.size(); ++i) groups[i].options().set_lr(lr * adamw_lr_ratios_[i]);
  if (muon_) muon_->set_lr(lr * muon_lr_ratio_);
}

void Optimizer::prepare_gradients() {
  for (const auto& hook : pre_step_) hook();
}

void Optimizer::update(const std::optional<torch::Tensor>& skip) {
  adamw_->update(skip);
  if (muon_) muon_->update(skip);
  for (const auto& hook : post_step_) hook();
}

std::unique_ptr<Optimizer> build_optimizer(const config::OptimizerConfig& cfg,
                                           const torch::OrderedDict<std::string, torch::Tensor>& params,
                                           const WholeParamsOf* whole, const model::Parametrization* shape) {
  return std::make_unique<Optimizer>(cfg, params, whole, shape);
}

void set_learning_rate(torch::optim::Optimizer& optim, double lr) {
  for (auto& group : optim.param_groups()) group.options().set_lr(lr);
}

AdamWState& AdamW::state_of(const torch::Tensor& param) {
  auto& slot = state_[param.unsafeGetTensorImpl()];
  if (!slot) {
    auto s = std::make_unique<AdamWState>();
    s->exp_avg(torch::zeros_like(param, torch::MemoryFormat::Preserve));
    s->exp_avg_sq(torch::zeros_like(param, torch::MemoryFormat::Preserve));
    s->step_count = torch::zeros({}, param.options().dtype(torch::kFloat));
    slot = std::move(s);
  }
  return static_cast<AdamWState&>(*slot);
}

torch::Tensor AdamW::step(LossClosure closure) {
  TORCH_CHECK(!closure, "siamese::train::AdamW::step takes no closure");
  update();
  return {};
}

void AdamW::update(const std::optional<torch::Tensor>& skip) {
  torch::NoGradGuard no_grad;
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    TORCH_CHECK(!o.amsgrad(), "amsgrad is not supported");
    const double lr = o.lr(), beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
    std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& s = state_of(p);
      params.push_back(p);
      grads.push_back(p.grad());
      exp_avgs.push_back(s.exp_avg());
      exp_avg_sqs.push_back(s.exp_avg_sq());
      steps.push_back(s.step_count);
    }
    if (params.empty()) continue;
    // One fused kernel over the group on CPU and CUDA alike (torch.optim.AdamW(fused=True)'s);
    // it leaves everything as it was when `skip` is 1, and the counts are taken back then.
    at::_foreach_add_(steps, 1.0);
    at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr, beta1, beta2,
                      o.weight_decay(), o.eps(), /*amsgrad=*/false,
                      /*maximize=*/false, /*grad_scale=*/std::nullopt, /*found_inf=*/skip);
    if (skip) at::_foreach_add_(steps, *skip, -1.0);
  }
}

torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm,
                             dist::ShardLayout* shards) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return torch::zeros({}, torch::kFloat);
  auto norms = at::_foreach_norm(grads, 2);
  auto total = norms.size() == 1 ? norms[0] : torch::stack(norms).norm(2);
  if (shards) {
    // sqrt(x * x) == x in binary floating point, so replicas get the norm unchanged.
    auto squared = total.square();
    shards->sum_shards_(squared);
    total = squared.sqrt();
  }
  if (std::isfinite(max_norm))
    at::_foreach_mul_(grads, torch::clamp(max_norm / (total + 1e-6), std::nullopt, 1.0));
  return total;
}

}  // namespace siamese::train
