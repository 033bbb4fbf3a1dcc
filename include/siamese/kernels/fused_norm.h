#pragma once
// Fused kernels where SiameseNorm spends its norm time: OLMo's RMSNorm and LayerNorm, and the
// SiameseNorm stream update (the two residual adds and the RMSNorms or LayerNorms that follow
// them; or one stream's add and norm) as single passes, forward and backward. CUDA tensors go to the CUDA
// kernels, CPU tensors to a CPU implementation of the same row maths (src/kernels/fused_norm_math.h). No
// autograd here: the nodes over these are the model's (model/norm.h, model/stream_update.h). Inputs are made
// contiguous; the normalized dimension is the last. Dtypes: CPU float32, float64, bfloat16; CUDA float32,
// bfloat16, float16. Half inputs are computed in float32 and returned in their own dtype; weights and the
// per-row r are float32 (float64 for float64 input), weight gradients come back in the weight's dtype. A
// norm's bias is not part of these: add it to the output.
#include <torch/torch.h>

namespace siamese::kernels {

// True when x's device and dtype have a fused kernel in this build.
bool norm_supports(const torch::Tensor& x);

// A norm without its bias: RMSNorm, y = x r w with r = rsqrt(mean(x^2) + eps), or, when
// centered, LayerNorm, y = (x - mu) r w with mu the row's mean and r = rsqrt(mean((x - mu)^2)
// + eps). r and mu are shaped as x with last dim 1 (mu undefined unless centered). The output
// is in x's dtype, or in float32 for a half x when float_out (LayerNorm under autocast).
struct NormOut {
  torch::Tensor y, r, mu;
};
NormOut norm_forward(const torch::Tensor& x, const torch::Tensor& weight /* or {} */, double eps,
                     bool centered = false, bool float_out = false);

// dy in the forward's output dtype; mu undefined for RMSNorm.
struct NormGrads {
  torch::Tensor dx, dw;  // dw undefined without weight
};
NormGrads norm_backward(const torch::Tensor& dy, const torch::Tensor& x, const torch::Tensor& r,
                        const torch::Tensor& mu, const torch::Tensor& weight /* or {} */);

// One stream's norm in the stream update: off, or an RMSNorm (a LayerNorm when centered)
// with an optional weight.
struct StreamNormSpec {
  bool on = false;
  torch::Tensor weight;  // undefined: no affine weight
  double eps = 1e-5;
  bool centered = false;
};

// SiameseNorm's stream update: x' = x + alpha o, y' = y + o, nx = norm(x'), ny = norm(y')
// for the norms that are on (nx, rx / ny, ry undefined otherwise); r is the per-row inverse
// RMS or standard deviation, mu the per-row mean of a centered norm (undefined otherwise).
// With y undefined (and norm_y off) it is one stream: x' = x + alpha o and nx, a residual add
// fused with the norm that reads the stream next; y' and dy stay undefined.
struct StreamUpdateOut {
  torch::Tensor x, y, nx, ny, rx, ry, mux, muy;
};
StreamUpdateOut stream_update_forward(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& o,
                                      double alpha, const StreamNormSpec& norm_x,
                                      const StreamNormSpec& norm_y);

// Gradients of the update from those of x', y', nx, ny (any undefined: zero), given the
// forward's x', y', rx, ry, mux, muy. dw_x / dw_y are undefined where that norm is off or unweighted.
struct StreamUpdateGrads {
  torch::Tensor dx, dy, d_o, dw_x, dw_y;
};
StreamUpdateGrads stream_update_backward(const torch::Tensor& d_x_out, const torch::Tensor& d_y_out,
                                         const torch::Tensor& d_nx, const torch::Tensor& d_ny,
                                         const StreamUpdateOut& saved, double alpha,
                                         const StreamNormSpec& norm_x, const StreamNormSpec& norm_y);

}  // namespace siamese::kernels
