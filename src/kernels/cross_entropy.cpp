// The cross-entropy passes' dispatch by device (cross_entropy.h): the CPU loops or the CUDA
// kernels.
#include "siamese/kernels/cross_entropy.h"
#include "siamese/kernels/families.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "softmax_cpu.h"
#include "softmax_kernel.h"
#include "tensor_dtype.h"

namespace siamese::kernels {
namespace {

bool is_bf16(const torch::Tensor& t) { return t.scalar_type() == torch::kBFloat16; }

void check_rows(const torch::Tensor& rows) {
  TORCH_CHECK(cross_entropy_supports(rows), "cross-entropy passes: none for ", rows.scalar_type(), " on ",
              rows.device());
  TORCH_CHECK(rows.dim() == 2 && rows.is_contiguous(),
              "cross-entropy passes: rows must be contiguous [N, V], got ", rows.sizes());
}

void run_rows_on_cuda(bool grad, const SoftmaxArgs& args, const torch::Tensor& rows) {
  const c10::cuda::CUDAGuard guard(rows.device());
  const auto stream = at::cuda::getCurrentCUDAStream().stream();
  const char* err = grad ? cross_entropy_grad_cuda(args, stream) : log_softmax_stats_cuda(args, stream);
  TORCH_CHECK(!err, "cross-entropy: CUDA kernel failed: ", err);
}

}  // namespace

bool cross_entropy_supports(const torch::Tensor& rows) { return takes(Family::CrossEntropy, rows); }

torch::Tensor log_softmax_stats(const torch::Tensor& rows) {
  check_rows(rows);
  auto stats = torch::empty({2, rows.size(0), 1}, rows.options().dtype(torch::kFloat));
  float* max = stats[0].data_ptr<float>();
  float* log_sum = stats[1].data_ptr<float>();
  if (rows.is_cuda()) {
    const SoftmaxArgs args{
        pass_dtype(rows), rows.size(0), rows.size(1), rows.data_ptr(), max, log_sum, nullptr, 0,
        nullptr,          nullptr,      nullptr};
    run_rows_on_cuda(false, args, rows);
  } else {
    log_softmax_stats(rows.data_ptr(), is_bf16(rows), max, log_sum, rows.size(0), rows.size(1));
  }
  return stats;
}

torch::Tensor cross_entropy_grad(const torch::Tensor& rows, const torch::Tensor& stats,
                                 const torch::Tensor& row_scale_in, const torch::Tensor& targets_in,
                                 const torch::Tensor& target_grad_in) {
  check_rows(rows);
  const auto options = rows.options().dtype(torch::kFloat);
  const auto row_scale = row_scale_in.to(options).contiguous();
  const auto target_grad = target_grad_in.to(options).reshape({1});
  const auto targets = targets_in.to(rows.device(), torch::kLong).contiguous();
  const int64_t stride = row_scale.numel() == 1 ? 0 : 1;
  TORCH_CHECK(stride == 0 || row_scale.numel() == rows.size(0), "cross-entropy: ", row_scale.numel(),
              " row scales for ", rows.size(0), " rows");
  auto grad = torch::empty_like(rows);
  if (rows.is_cuda()) {
    const SoftmaxArgs args{pass_dtype(rows),
                           rows.size(0),
                           rows.size(1),
                           rows.data_ptr(),
                           const_cast<float*>(stats[0].data_ptr<float>()),
                           const_cast<float*>(stats[1].data_ptr<float>()),
                           row_scale.data_ptr<float>(),
                           stride,
                           targets.data_ptr<int64_t>(),
                           target_grad.data_ptr<float>(),
                           grad.data_ptr()};
    run_rows_on_cuda(true, args, rows);
  } else {
    cross_entropy_grad(rows.data_ptr(), stats[0].data_ptr<float>(), stats[1].data_ptr<float>(),
                       row_scale.data_ptr<float>(), stride, targets.data_ptr<int64_t>(),
                       target_grad.item<float>(), grad.data_ptr(), is_bf16(rows), rows.size(0), rows.size(1));
  }
  return grad;
}

}  // namespace siamese::kernels
