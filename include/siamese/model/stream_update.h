#pragma once
// SiameseNorm's stream update as one autograd node over the fused kernels of
// siamese/kernels/fused_norm.h: x' = x + alpha o, y' = y + o and the norms of x', y' that are
// on, forward and backward in single passes; and its one-stream form.
#include <torch/torch.h>

#include "siamese/kernels/fused_norm.h"

namespace siamese::model {

// x', y', and nx / ny (undefined where that norm is off).
struct Streams {
  torch::Tensor x, y, nx, ny;
};

// Gradients reach x, y, o and the norms' weights.
Streams stream_update(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& o, double alpha,
                      const kernels::StreamNormSpec& norm_x, const kernels::StreamNormSpec& norm_y);

// One stream: x' = x + alpha o and norm(x') (Streams::x, Streams::nx), the residual add of a
// single-stream topology fused with the norm that reads the stream next.
Streams residual_update(const torch::Tensor& x, const torch::Tensor& o, double alpha,
                        const kernels::StreamNormSpec& norm);

}  // namespace siamese::model
