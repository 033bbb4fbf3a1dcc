#include "siamese/model/parametrization.h"

#include <fmt/format.h>

#include <cmath>

#include "siamese/common/error.h"
#include "siamese/model/accounting.h"
#include "siamese/model/olmo_names.h"

namespace siamese::model {

double Parametrization::hidden_init() const { return 1.0 / std::sqrt(width); }
double Parametrization::logits() const { return 1.0 / width; }
double Parametrization::branch() const { return std::pow(depth, -alpha); }
double Parametrization::softmax() const { return 1.0 / head; }

OptimizerScale Parametrization::optimizer(const std::string& name, const torch::Tensor& p, bool muon,
                                          bool muon_match_rms) const {
  OptimizerScale s;
  if (standard()) return s;
  const bool completep = scheme == config::Parametrization::CompleteP;
  const double depth_lr = completep ? std::pow(depth, alpha - 1.0) : 1.0;
  const ParamKind kind = param_kind(name);
  const auto owner = parse_param_name(name).owner;
  const bool hidden = kind == ParamKind::Linear && p.dim() >= 2 &&
                      (owner == ParamName::Owner::Attention || owner == ParamName::Owner::Mlp);
  if (hidden) {
    s.lr = depth_lr * (muon && !muon_match_rms ? 1.0 : 1.0 / width);
    s.eps = (1.0 / width) * (completep ? std::pow(depth, -alpha) : 1.0);
  } else if (kind == ParamKind::Norm || kind == ParamKind::Bias || is_topology_tensor(name)) {
    s.lr = depth_lr;
  }
  s.weight_decay = 1.0 / s.lr;
  return s;
}

std::string Parametrization::describe() const {
  if (standard()) return "standard";
  std::string out = fmt::format(
      "{}: width x{:.4g}, depth x{:.4g}; hidden init x{:.4g}, logits x{:.4g}, attention q.k x{:.4g}",
      config::name_of(scheme), width, depth, hidden_init(), logits(), softmax());
  if (scheme == config::Parametrization::CompleteP)
    out += fmt::format(", sublayer outputs x{:.4g} (alpha {:.4g})", branch(), alpha);
  return out;
}

Parametrization parametrization(const config::ModelConfig& cfg) {
  Parametrization p;
  p.scheme = cfg.parametrization;
  if (p.standard()) return p;
  const auto& m = cfg.mup;
  const int64_t base_d = m.base_d_model.value_or(cfg.d_model);
  const int64_t base_heads = m.base_n_heads.value_or(cfg.n_heads);
  p.width = double(cfg.d_model) / double(base_d);
  p.head = (double(cfg.d_model) / double(cfg.n_heads)) / (double(base_d) / double(base_heads));
  if (p.scheme == config::Parametrization::CompleteP) {
    p.depth = double(cfg.n_layers) / double(m.base_n_layers.value_or(cfg.n_layers));
    p.alpha = m.depth_alpha;
  }
  return p;
}

void check_parametrization(const config::ModelConfig& cfg, const std::string& no_width_rule,
                           const std::string& no_depth_rule) {
  if (cfg.parametrization == config::Parametrization::Standard) return;
  const std::string scheme = config::name_of(cfg.parametrization);
  const std::string key = "model.parametrization";
  const std::string fix = "use model.parametrization standard";
  if (!no_width_rule.empty())
    throw Error(fmt::format("{} has no rule for topology {}: {}", scheme, cfg.residual, no_width_rule), key,
                fix);
  if (cfg.is_moe())
    throw Error(
        scheme + " has no rule for an MoE block's router here (OLMo-core treats it as an output weight)", key,
        fix + ", or block_type sequential");
  if (cfg.init_fn != config::InitFn::Normal)
    throw Error(
        fmt::format("{} scales the init of init_fn normal; {} already scales its stds with width or depth",
                    scheme, config::name_of(cfg.init_fn)),
        "model.init_fn", "set model.init_fn: normal (the base shape's std is model.init_std)");
  if (cfg.scale_logits)
    throw Error(
        scheme + " multiplies the logits by base_d_model / d_model; scale_logits would scale them again",
        "model.scale_logits", "set model.scale_logits: false");
  const auto& m = cfg.mup;
  const int64_t base_d = m.base_d_model.value_or(cfg.d_model);
  const int64_t base_heads = m.base_n_heads.value_or(cfg.n_heads);
  if (base_d % base_heads != 0)
    throw Error(fmt::format("base_d_model {} is not a multiple of base_n_heads {}", base_d, base_heads),
                "model.mup.base_d_model", "choose a base shape whose heads divide its width");
  if (cfg.parametrization != config::Parametrization::CompleteP) return;
  if (!no_depth_rule.empty())
    throw Error(fmt::format("completep has no depth rule for topology {}: {}", cfg.residual, no_depth_rule),
                key,
                "use model.parametrization mup (width only), or a topology with a residual sum (pre, peri, "
                "lns, hc, mhc, ...)");
  if (m.depth_alpha < 0.5 || m.depth_alpha > 1.0)
    throw Error(fmt::format("depth_alpha {} is outside [0.5, 1]", m.depth_alpha), "model.mup.depth_alpha",
                "use 1 (CompleteP) or 0.5 (depth-muP), the ends of the family the paper compares");
}

}  // namespace siamese::model
