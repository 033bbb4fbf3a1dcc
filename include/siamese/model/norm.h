#pragma once
// The normalization layers of an OLMo model: LayerNorm and RMSNorm, with or without an
// affine weight and bias. Residual-path topologies, the per-head QKV norms and OLMo's
// attention_layer_norm all build their norms here so `layer_norm_type` means one thing.
#include <torch/torch.h>

#include "siamese/config/config.h"

namespace siamese::model {

enum class NormKind { LayerNorm, RMS };

class NormImpl : public torch::nn::Module {
 public:
  // weight (init 1) exists when `affine`; bias (init 0) when `affine && bias`.
  NormImpl(NormKind kind, int64_t dim, double eps, bool affine, bool bias);

  // Normalizes over the last dimension. Half inputs (autocast) are normalized in float32:
  // RMSNorm casts the result back (as OLMo's RMSLayerNorm does), LayerNorm returns float32
  // (as CUDA autocast's layer_norm does). Other inputs keep their own precision.
  torch::Tensor forward(const torch::Tensor& x);

  NormKind kind() const { return kind_; }
  double eps() const { return eps_; }

  torch::Tensor weight;  // undefined when not affine
  torch::Tensor bias;    // undefined when absent

 private:
  NormKind kind_;
  int64_t dim_;
  double eps_;
};
TORCH_MODULE(Norm);

// The norm the config asks for: layer_norm_type (default / low_precision = LayerNorm,
// rms = RMSNorm), layer_norm_with_affine, bias_for_layer_norm (unset = include_bias),
// layer_norm_eps.
Norm make_norm(const ModelConfig& cfg, int64_t dim);

// A parameter-free RMSNorm (used e.g. on embeddings by `pre_embednorm`).
Norm make_plain_rms_norm(const ModelConfig& cfg, int64_t dim);

}  // namespace siamese::model
