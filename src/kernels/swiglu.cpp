// SwiGLU's dispatch by device (swiglu.h): the CPU loops or the CUDA kernels.
#include "siamese/kernels/swiglu.h"
#include "siamese/kernels/families.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "swiglu_cpu.h"
#include "swiglu_kernel.h"
#include "tensor_dtype.h"

namespace siamese::kernels {
namespace {

void run_on_cuda(bool backward, const torch::Tensor& h, int64_t rows, const torch::Tensor* g,
                 torch::Tensor& out) {
  const SwigluArgs args{pass_dtype(h), rows, h.size(-1) / 2, h.data_ptr(), g ? g->data_ptr() : nullptr,
                        out.data_ptr()};
  const c10::cuda::CUDAGuard guard(h.device());
  const auto stream = at::cuda::getCurrentCUDAStream().stream();
  const char* err = backward ? swiglu_backward_cuda(args, stream) : swiglu_forward_cuda(args, stream);
  TORCH_CHECK(!err, "SwiGLU: CUDA kernel failed: ", err);
}

void check_h(const torch::Tensor& h) {
  TORCH_CHECK(swiglu_supports(h), "SwiGLU: no fused pass for ", h.scalar_type(), " on ", h.device());
  TORCH_CHECK(h.dim() >= 1 && h.size(-1) > 0 && h.size(-1) % 2 == 0, "SwiGLU: the last dimension of ",
              h.sizes(), " is not [a | b] of even, positive width");
}

}  // namespace

bool swiglu_supports(const torch::Tensor& h) { return takes(Family::Swiglu, h); }

torch::Tensor swiglu(const torch::Tensor& h_in) {
  check_h(h_in);
  const auto h = h_in.contiguous();
  const int64_t n = h.size(-1) / 2, rows = h.numel() / h.size(-1);
  auto sizes = h.sizes().vec();
  sizes.back() = n;
  auto out = torch::empty(sizes, h.options());
  if (h.is_cuda())
    run_on_cuda(false, h, rows, nullptr, out);
  else
    swiglu_forward(h.data_ptr(), out.data_ptr(), rows, n, h.scalar_type() == torch::kBFloat16);
  return out;
}

torch::Tensor swiglu_backward(const torch::Tensor& h_in, const torch::Tensor& g_in) {
  check_h(h_in);
  const auto h = h_in.contiguous(), g = g_in.to(h.scalar_type()).contiguous();
  const int64_t n = h.size(-1) / 2, rows = h.numel() / h.size(-1);
  TORCH_CHECK(g.numel() == rows * n && g.size(-1) == n, "SwiGLU backward: gradient ", g.sizes(),
              " does not match the input ", h.sizes());
  auto dh = torch::empty_like(h);
  if (h.is_cuda())
    run_on_cuda(true, h, rows, &g, dh);
  else
    swiglu_backward(h.data_ptr(), g.data_ptr(), dh.data_ptr(), rows, n, h.scalar_type() == torch::kBFloat16);
  return dh;
}

}  // namespace siamese::kernels
