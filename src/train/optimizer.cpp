#include "siamese/train/optimizer.h"
#include "siamese/model/accounting.h"

#include <algorithm>
#include <cmath>

#include "siamese/common/error.h"
#include "siamese/model/olmo_names.h"
#include "siamese/model/transformer.h"

namespace siamese::train {

ParamGroups param_groups(const config::OptimizerConfig& cfg,
                         const torch::OrderedDict<std::string, torch::Tensor>& params) {
  using model::ParamKind;
  ParamGroups g;
  for (const auto& item : params) {
    if (!item.value().requires_grad()) continue;
    const ParamKind kind = model::param_kind(item.key());
    // Muon's matrices are the hidden layers' (MoE experts' stacks and routers included): the
    // LM head (untied; tied, it is the embedding) maps to the vocabulary and stays with
    // AdamW, as in Keller Jordan's setup.
    if (cfg.name == config::OptimizerName::Muon && kind == ParamKind::Linear && item.value().dim() >= 2 &&
        model::parse_param_name(item.key()).owner != model::ParamName::Owner::Head) {
      g.muon.push_back(item.key());
      continue;
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
    (decay ? g.decay : g.no_decay).push_back(item.key());
  }
  std::sort(g.decay.begin(), g.decay.end());
  std::sort(g.no_decay.begin(), g.no_decay.end());
  std::sort(g.muon.begin(), g.muon.end());
  return g;
}

Optimizer::Optimizer(const config::OptimizerConfig& cfg,
                     const torch::OrderedDict<std::string, torch::Tensor>& params,
                     const WholeParamsOf* whole) {
  if (cfg.betas.size() != 2) throw Error("betas needs two values", "optimizer.betas", "e.g. [0.9, 0.95]");
  auto options = [&](double weight_decay) {
    return std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(cfg.learning_rate)
                                                            .betas({cfg.betas[0], cfg.betas[1]})
                                                            .eps(cfg.eps)
                                                            .weight_decay(weight_decay));
  };
  const ParamGroups g = param_groups(cfg, whole ? whole->params : params);
  auto tensors = [&](const std::vector<std::string>& names) {
    std::vector<torch::Tensor> out;
    for (const auto& n : names) out.push_back(params[n]);
    return out;
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (!g.decay.empty()) groups.emplace_back(tensors(g.decay), options(cfg.weight_decay));
  if (!g.no_decay.empty()) groups.emplace_back(tensors(g.no_decay), options(0.0));
  adamw_ = std::make_unique<AdamW>(std::move(groups), torch::optim::AdamWOptions(cfg.learning_rate));
  if (!g.muon.empty()) {
    const config::MuonConfig& m = cfg.muon;
    MuonOptions o;
    o.lr = m.learning_rate.value_or(cfg.learning_rate);
    o.weight_decay = m.weight_decay.value_or(cfg.weight_decay);
    o.momentum = m.momentum;
    o.nesterov = m.nesterov;
    o.ns_steps = m.ns_steps;
    o.adjust_lr = m.adjust_lr;
    muon_lr_ratio_ = o.lr / cfg.learning_rate;
    std::vector<std::vector<int64_t>> shapes;
    for (const auto& n : g.muon) shapes.push_back((whole ? whole->params[n] : params[n]).sizes().vec());
    muon_ = std::make_unique<Muon>(tensors(g.muon), o, std::move(shapes), whole ? whole->layout : nullptr);
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

void Optimizer::set_learning_rate(double lr) {
  train::set_learning_rate(*adamw_, lr);
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
                                           const WholeParamsOf* whole) {
  return std::make_unique<Optimizer>(cfg, params, whole);
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
