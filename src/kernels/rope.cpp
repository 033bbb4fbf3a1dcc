// RoPE's rotation (rope.h): the CUDA kernel of rope_kernel.h where it applies, else ATen
// passes.
#include "siamese/kernels/rope.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "rope_kernel.h"
#include "siamese/kernels/families.h"

namespace siamese::kernels {
namespace {

// On CUDA with float32 angles: one kernel reads t in its dtype, rotates in float32 and
// writes t's dtype (rope_kernel.h). Tables are [T, hd / 2] (shared by the batch) or
// [B, 1, T, hd / 2] (per-row positions).
bool rotates_on_cuda(const torch::Tensor& t, const torch::Tensor& s) {
  const auto dt = t.scalar_type();
  return t.is_cuda() && s.scalar_type() == torch::kFloat && t.dim() == 4 && t.stride(-1) == 1 &&
         (dt == torch::kFloat || dt == torch::kBFloat16 || dt == torch::kHalf) &&
         (s.dim() == 2 || s.dim() == 4);
}

torch::Tensor rotate_on_cuda(const torch::Tensor& t, const torch::Tensor& s, const torch::Tensor& c,
                             float sign) {
  const auto sin = s.contiguous(), cos = c.contiguous();
  auto out = torch::empty(t.sizes(), t.options());
  const int64_t half = t.size(3) / 2;
  TORCH_CHECK(
      sin.size(-1) == half && sin.size(-2) == t.size(2) && (sin.dim() == 2 || sin.size(0) == t.size(0)),
      "RoPE tables ", sin.sizes(), " do not match ", t.sizes());
  const DType dtype = t.scalar_type() == torch::kFloat      ? DType::Float32
                      : t.scalar_type() == torch::kBFloat16 ? DType::BFloat16
                                                            : DType::Float16;
  const RopeArgs args{dtype,
                      t.size(0),
                      t.size(1),
                      t.size(2),
                      half,
                      t.stride(0),
                      t.stride(1),
                      t.stride(2),
                      sin.dim() == 4 ? t.size(2) * half : 0,
                      sign,
                      t.data_ptr(),
                      sin.data_ptr<float>(),
                      cos.data_ptr<float>(),
                      out.data_ptr()};
  const c10::cuda::CUDAGuard guard(t.device());
  const char* err = run_cuda(args, at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(!err, "RoPE: CUDA kernel failed: ", err);
  return out;
}

}  // namespace

torch::Tensor rope_rotate(const torch::Tensor& t_in, const torch::Tensor& s, const torch::Tensor& c,
                          float sign) {
  const auto t = t_in.to(s.scalar_type());
  const int64_t h = t.size(-1) / 2;
  if (!takes(Family::Rope, t_in)) {
    // The textbook composition: t cos + rotate_half(t) sin, tables repeated over both halves.
    const auto s2 = torch::cat({s, s}, -1), c2 = torch::cat({c, c}, -1);
    const auto rotated = torch::cat({-t.narrow(-1, h, h), t.narrow(-1, 0, h)}, -1);
    return (t * c2 + rotated * s2 * sign).to(t_in.scalar_type());
  }
  if (rotates_on_cuda(t_in, s)) return rotate_on_cuda(t_in, s, c, sign);
  const auto t1 = t.narrow(-1, 0, h), t2 = t.narrow(-1, h, h);
  auto out = torch::empty_like(t, at::MemoryFormat::Contiguous);
  auto o1 = out.narrow(-1, 0, h), o2 = out.narrow(-1, h, h);
  torch::mul_out(o1, t1, c).addcmul_(t2, s, -sign);
  torch::mul_out(o2, t2, c).addcmul_(t1, s, sign);
  return out.to(t_in.scalar_type());
}

}  // namespace siamese::kernels
