#pragma once
// The cross-entropy's vocabulary-wide passes, the ops under model/lm_loss.cpp's autograd node:
// the softmax's statistics in forward and, in backward, the gradient in one pass, computed in
// float from the logits' own dtype (softmax_math.h, shared by both backends). Nothing of
// [rows, vocab] size is kept between them but the logits. On the CPU (float32, bfloat16) the
// vectorised loops of softmax_cpu.h, whose exp has no slow path for a trained model's
// far-negative log-probabilities; on CUDA (float32, bfloat16, float16) the kernels of
// src/kernels/softmax.cu, which spare autocast's logits their float32 copy.
#include <torch/torch.h>

namespace siamese::kernels {

// Whether logits rows of this device and dtype have the passes.
bool cross_entropy_supports(const torch::Tensor& rows);

// rows: [N, V] -> float32 [2, N, 1]: each row's maximum, then log(sum_j exp(x_j - max)), so
// that log_softmax(rows) = (rows - stats[0]) - stats[1].
torch::Tensor log_softmax_stats(const torch::Tensor& rows);

// The gradient of sum_i row_scale_i logsumexp(rows_i) - target_grad sum_i rows_i[targets_i]:
// softmax(rows) * row_scale, less target_grad at each row's target, in rows' dtype. row_scale:
// float32 [N, 1] or one value; target_grad: one float32 value; both on rows' device (no sync).
torch::Tensor cross_entropy_grad(const torch::Tensor& rows, const torch::Tensor& stats,
                                 const torch::Tensor& row_scale, const torch::Tensor& targets,
                                 const torch::Tensor& target_grad);

}  // namespace siamese::kernels
