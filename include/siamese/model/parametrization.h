#pragma once
// model.parametrization: how the init, the optimizer's settings and the forward multipliers of
// a model follow its width and depth away from a base shape (model.mup.*), so that learning
// rates tuned at the base shape hold at other sizes. docs/analysis.md, "Parametrizations",
// states the rules and where each comes from; this file is the one place they live.
//
//   m_d = d_model / base_d_model, m_L = n_layers / base_n_layers, m_h = head_dim / base head_dim
//   mup (Yang et al. 2022, arXiv 2203.03466, Table 3 for Adam, with the output multiplier):
//     hidden matrices: init std * m_d^-1/2, Adam lr * m_d^-1, eps * m_d^-1, weight decay * m_d
//     embeddings, the head, vectors: unchanged; logits * m_d^-1; attention q.k * m_h^-1
//   completep (Dey et al. 2025, arXiv 2505.01618, Table 1, alpha = model.mup.depth_alpha):
//     mup, and every sublayer's output * m_L^-alpha before it joins the residual stream;
//     hidden lr * m_L^(alpha-1), eps * m_L^-alpha; vectors' lr * m_L^(alpha-1)
// Weight decay follows the inverse of each learning rate's factor, so that lr * wd (the decay
// a decoupled AdamW step applies) is the base shape's.
#include <torch/torch.h>

#include <string>
#include <vector>

#include "siamese/config/config.h"

namespace siamese::model {

// What one parameter's optimizer settings are multiplied by.
struct OptimizerScale {
  double lr = 1.0;
  double weight_decay = 1.0;
  double eps = 1.0;
};

struct Parametrization {
  config::Parametrization scheme = config::Parametrization::Standard;
  double width = 1.0;  // m_d
  double depth = 1.0;  // m_L
  double head = 1.0;   // m_h
  double alpha = 0.0;  // the depth exponent: depth_alpha under completep, else 0

  bool standard() const { return scheme == config::Parametrization::Standard; }
  double hidden_init() const;  // the hidden matrices' init std factor
  double logits() const;       // the LM head's output multiplier
  double branch() const;       // each sublayer output's factor before the residual add
  double softmax() const;      // the factor on attention's q.k scale
  // A parameter by our name (olmo_names.h); `muon` for Muon's matrices, `muon_match_rms` when
  // Muon's step is scaled to AdamW's RMS (then its width rule is AdamW's; otherwise Muon's
  // orthogonalized step already has the spectral scale a width change needs).
  OptimizerScale optimizer(const std::string& name, const torch::Tensor& p, bool muon,
                           bool muon_match_rms) const;
  // For the start-up log and run.json: "completep: width x4 (d_model 256 / 64), ...".
  std::string describe() const;
};

// The parametrization of `cfg` (a standard one for model.parametrization standard).
Parametrization parametrization(const config::ModelConfig& cfg);

// Refuses settings the rules are not defined for (check_model_config calls it): nGPT (its
// unit-norm weights and own scales set every size's magnitudes), MoE (the router's rule is
// not built), init_fn other than normal (mitchell and full_megatron already scale with width or
// depth), scale_logits (a second output multiplier), completep on a topology without a
// residual sum (`no_depth_rule`: the table's reason), and base shapes that do not divide.
void check_parametrization(const config::ModelConfig& cfg, const std::string& no_width_rule,
                           const std::string& no_depth_rule);

}  // namespace siamese::model
