// The head preparation's dispatch by device (qkv_heads.h): the CPU loop or the CUDA kernels.
#include "siamese/kernels/qkv_heads.h"
#include "siamese/kernels/families.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "qkv_heads_kernel.h"
#include "tensor_dtype.h"

namespace siamese::kernels {
namespace {

QkvHeadsArgs args_of(const torch::Tensor& qkv, const QkvHeadsSpec& spec, const torch::Tensor& sin,
                     const torch::Tensor& cos) {
  TORCH_CHECK(qkv_heads_supports(qkv, spec), "qkv heads: no pass for ", qkv.scalar_type(), " ", qkv.sizes(),
              " on ", qkv.device(), " with head_dim ", spec.head_dim);
  QkvHeadsArgs a{};
  a.dtype = pass_dtype(qkv);
  a.B = qkv.size(0);
  a.T = qkv.size(1);
  a.heads = spec.heads;
  a.kv_heads = spec.kv_heads;
  a.hd = spec.head_dim;
  for (int p = 0; p < 3; ++p) a.norm[p] = spec.norm[p];
  a.centered = spec.centered;
  a.eps = static_cast<float>(spec.eps);
  a.rope = spec.rope;
  if (spec.rope) {
    for (const auto* table : {&sin, &cos})
      TORCH_CHECK(table->scalar_type() == torch::kFloat && table->is_contiguous() && table->dim() == 2 &&
                      table->size(0) == a.T && table->size(1) == a.hd / 2 && table->device() == qkv.device(),
                  "qkv heads: RoPE tables must be float32 [T, hd / 2] on qkv's device, got ", table->sizes());
    a.sin = sin.data_ptr<float>();
    a.cos = cos.data_ptr<float>();
  }
  a.qkv = qkv.data_ptr();
  return a;
}

void run(bool backward, const QkvHeadsArgs& a, const torch::Tensor& qkv) {
  if (!qkv.is_cuda()) return backward ? qkv_heads_backward_cpu(a) : qkv_heads_forward_cpu(a);
  const c10::cuda::CUDAGuard guard(qkv.device());
  const auto stream = at::cuda::getCurrentCUDAStream().stream();
  const char* err = backward ? qkv_heads_backward_cuda(a, stream) : qkv_heads_forward_cuda(a, stream);
  TORCH_CHECK(!err, "qkv heads: CUDA kernel failed: ", err);
}

int64_t heads_of(const QkvHeadsSpec& spec, int part) { return part == 0 ? spec.heads : spec.kv_heads; }

}  // namespace

bool qkv_heads_supports(const torch::Tensor& qkv, const QkvHeadsSpec& spec) {
  const int64_t hd = spec.head_dim;
  return takes(Family::QkvHeads, qkv) && qkv.dim() == 3 && (hd == 32 || hd == 64 || hd == 128 || hd == 256) &&
         qkv.size(2) == (spec.heads + 2 * spec.kv_heads) * hd;
}

std::array<torch::Tensor, 3> qkv_heads(const torch::Tensor& qkv_in, const QkvHeadsSpec& spec,
                                       const torch::Tensor& sin, const torch::Tensor& cos) {
  const auto qkv = qkv_in.contiguous();
  QkvHeadsArgs a = args_of(qkv, spec, sin, cos);
  std::array<torch::Tensor, 3> buffers;
  for (int p = 0; p < 3; ++p) {
    buffers[p] = torch::empty({a.B, a.T, heads_of(spec, p), a.hd}, qkv.options());
    a.out[p] = buffers[p].data_ptr();
  }
  run(false, a, qkv);
  return {buffers[0].transpose(1, 2), buffers[1].transpose(1, 2), buffers[2].transpose(1, 2)};
}

torch::Tensor qkv_heads_backward(const torch::Tensor& qkv_in, const QkvHeadsSpec& spec,
                                 const torch::Tensor& sin, const torch::Tensor& cos,
                                 const std::array<torch::Tensor, 3>& grads_in) {
  const auto qkv = qkv_in.contiguous();
  QkvHeadsArgs a = args_of(qkv, spec, sin, cos);
  std::array<torch::Tensor, 3> grads;
  for (int p = 0; p < 3; ++p) {
    const std::vector<int64_t> shape{a.B, heads_of(spec, p), a.T, a.hd};
    auto g = grads_in[p].defined() ? grads_in[p].to(qkv.scalar_type()) : torch::zeros(shape, qkv.options());
    TORCH_CHECK(g.sizes() == at::IntArrayRef(shape), "qkv heads backward: gradient ", g.sizes(), " for part ",
                p, " of shape ", at::IntArrayRef(shape));
    if (g.stride(3) != 1) g = g.contiguous();
    grads[p] = g;
    a.grad[p] = g.data_ptr();
    for (int d = 0; d < 3; ++d) a.grad_stride[p][d] = g.stride(d);
  }
  auto dqkv = torch::empty_like(qkv);
  a.dqkv = dqkv.data_ptr();
  run(true, a, qkv);
  return dqkv;
}

}  // namespace siamese::kernels
