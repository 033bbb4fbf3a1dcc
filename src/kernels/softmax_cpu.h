#pragma once
// The vocabulary-wide passes of the cross-entropy on the CPU (model/lm_loss.cpp), in float for
// float32 and bfloat16 logits (autocast's, read and written without a float32 copy), with
// an exp that takes no slow path: once a model has learned, most of a row's log-probabilities
// sit far below -87, where ATen's vectorised exp and the products after it turn subnormal and
// run 3-30x slower (docs/results.md, "The loss on the CPU"). Results below FLT_MIN (1.2e-38)
// are flushed to zero; everything else is exp to 2 ulp.
#include <cstdint>

namespace siamese::kernels {

// Per row i of x [rows, vocab]: max[i] and log_sum[i] = log(sum_j exp(x[i, j] - max[i])), so
// that log_softmax(x)[i, j] = (x[i, j] - max[i]) - log_sum[i]. Two numbers a row are all the
// loss keeps of the softmax: its backward recomputes the exp from the logits, and no
// [rows, vocab] log-probabilities are written. x is bfloat16 where bf16, float otherwise.
void log_softmax_stats(const void* x, bool bf16, float* max, float* log_sum, int64_t rows, int64_t vocab);

// grad[i, j] = exp((x[i, j] - max[i]) - log_sum[i]) * row_scale[i], then
// grad[i, target[i]] -= target_grad: one pass where LibTorch takes an exp, a scale and a
// scatter. row_scale_stride 0: one scale for every row. grad and x are bfloat16 where bf16,
// float otherwise, and grad does not overlap x.
void cross_entropy_grad(const void* x, const float* max, const float* log_sum, const float* row_scale,
                        int64_t row_scale_stride, const int64_t* targets, float target_grad, void* grad,
                        bool bf16, int64_t rows, int64_t vocab);

}  // namespace siamese::kernels
