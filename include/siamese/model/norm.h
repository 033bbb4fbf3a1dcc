#pragma once
// The normalization layers of an OLMo model: LayerNorm and RMSNorm, with or without an
// affine weight and bias, and the point-wise stand-ins that replace them without statistics:
// DyT (Zhu et al. 2025, "Transformers without Normalization", arXiv 2503.10622) and Derf
// (Chen et al. 2025, "Stronger Normalization-Free Transformers", arXiv 2512.10938).
// Residual-path topologies, the per-head QKV norms and OLMo's attention_layer_norm all build
// their norms here so `layer_norm_type` means one thing.
#include <torch/torch.h>

#include <optional>

#include "siamese/config/config.h"

namespace siamese::model {

enum class NormKind {
  LayerNorm,
  RMS,
  DyT,   // weight * tanh(alpha x) + bias
  Derf,  // weight * erf(alpha x + shift) + bias
};

class NormImpl : public torch::nn::Module {
 public:
  // weight (init 1) exists when `affine`; bias (init 0) when `affine && bias`. DyT has a
  // learnable scalar alpha (init alpha_init), Derf alpha and shift (init shift_init); both
  // ignore eps.
  NormImpl(NormKind kind, int64_t dim, double eps, bool affine, bool bias, double alpha_init = 0.5,
           double shift_init = 0.0);

  // Normalizes over the last dimension. Half inputs (autocast) are normalized in float32:
  // RMSNorm casts the result back (as OLMo's RMSLayerNorm does), LayerNorm returns float32
  // (as CUDA autocast's layer_norm does). Other inputs keep their own precision.
  torch::Tensor forward(const torch::Tensor& x);

  NormKind kind() const { return kind_; }
  double eps() const { return eps_; }

  torch::Tensor weight;  // undefined when not affine
  torch::Tensor bias;    // undefined when absent
  torch::Tensor alpha;   // [1]; DyT and Derf only
  torch::Tensor shift;   // [1]; Derf only

 private:
  // The ATen composition, where the norm kernels are switched off.
  torch::Tensor aten_forward(const torch::Tensor& x);

  NormKind kind_;
  int64_t dim_;
  double eps_;
};
TORCH_MODULE(Norm);

// layer_norm_type: default / low_precision = LayerNorm, rms = RMSNorm, dyt, derf.
NormKind norm_kind(const config::ModelConfig& cfg);

// The norm the config asks for: norm_kind(cfg), layer_norm_eps, bias_for_layer_norm (unset =
// include_bias), the point-wise norms' init keys; affine = layer_norm_with_affine unless given
// (attention's Q/K norms follow attention_layer_norm_with_affine).
Norm make_norm(const config::ModelConfig& cfg, int64_t dim, std::optional<bool> affine = std::nullopt);

// How many parameters make_norm(cfg, dim, affine) holds, without building it.
int64_t norm_parameter_count(const config::ModelConfig& cfg, int64_t dim,
                             std::optional<bool> affine = std::nullopt);

// A parameter-free RMSNorm (used e.g. on embeddings by `pre_embednorm`).
Norm make_plain_rms_norm(const config::ModelConfig& cfg, int64_t dim);

}  // namespace siamese::model
