#include "siamese/model/rope.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "rope_kernel.h"

namespace siamese::model {

Rope::Rope(int64_t head_dim, double theta, bool full_precision)
    : head_dim_(head_dim), theta_(theta), full_precision_(full_precision) {}

std::pair<torch::Tensor, torch::Tensor> Rope::tables(int64_t T, const torch::Device& device) {
  if (!sin_.defined() || sin_.size(0) < T || sin_.device() != device) {
    auto opts = torch::TensorOptions().dtype(torch::kFloat).device(device);
    auto inv_freq = 1.0 / torch::pow(theta_, torch::arange(0, head_dim_, 2, opts) / double(head_dim_));
    auto angles = torch::outer(torch::arange(T, opts), inv_freq);
    sin_ = angles.sin();
    cos_ = angles.cos();
  }
  return {sin_.slice(0, 0, T), cos_.slice(0, 0, T)};
}

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
  namespace rk = rope_kernel;
  const auto sin = s.contiguous(), cos = c.contiguous();
  auto out = torch::empty(t.sizes(), t.options());
  const int64_t half = t.size(3) / 2;
  TORCH_CHECK(
      sin.size(-1) == half && sin.size(-2) == t.size(2) && (sin.dim() == 2 || sin.size(0) == t.size(0)),
      "RoPE tables ", sin.sizes(), " do not match ", t.sizes());
  const rk::DType dtype = t.scalar_type() == torch::kFloat      ? rk::DType::Float32
                          : t.scalar_type() == torch::kBFloat16 ? rk::DType::BFloat16
                                                                : rk::DType::Float16;
  const rk::RopeArgs args{dtype,
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
  const char* err = rk::run_cuda(args, at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(!err, "RoPE: CUDA kernel failed: ", err);
  return out;
}

// The rotation of t's two halves by angles with sines sign * s and cosines c ([.., hd / 2]
// broadcast against them): [t1 c - t2 s, t2 c + t1 s], computed in s's dtype and returned in
// t's. Elsewhere than on CUDA the halves are written by four passes into halves of the
// output, where the textbook t*cos + rotate_half(t)*sin takes a negation, a concatenation and
// three full-width passes (bench --profile: `cat` and `neg` were 2% of the CPU step).
torch::Tensor rotate_halves(const torch::Tensor& t_in, const torch::Tensor& s, const torch::Tensor& c,
                            float sign) {
  if (rotates_on_cuda(t_in, s)) return rotate_on_cuda(t_in, s, c, sign);
  const auto t = t_in.to(s.scalar_type());
  const int64_t h = t.size(-1) / 2;
  const auto t1 = t.narrow(-1, 0, h), t2 = t.narrow(-1, h, h);
  auto out = torch::empty_like(t, at::MemoryFormat::Contiguous);
  auto o1 = out.narrow(-1, 0, h), o2 = out.narrow(-1, h, h);
  torch::mul_out(o1, t1, c).addcmul_(t2, s, -sign);
  torch::mul_out(o2, t2, c).addcmul_(t1, s, sign);
  return out.to(t_in.scalar_type());
}

// Its backward is the rotation by the negative angles.
class RopeRotation : public torch::autograd::Function<RopeRotation> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& t,
                               const torch::Tensor& s, const torch::Tensor& c) {
    ctx->save_for_backward({s, c});
    return rotate_halves(t, s, c, 1.0f);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    return {rotate_halves(grads[0], saved[0], saved[1], -1.0f), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

std::pair<torch::Tensor, torch::Tensor> Rope::rotate(const torch::Tensor& q, const torch::Tensor& k,
                                                     torch::Tensor sin, torch::Tensor cos) const {
  const bool half = q.scalar_type() == torch::kHalf || q.scalar_type() == torch::kBFloat16;
  const auto compute = (half && full_precision_) ? torch::kFloat : q.scalar_type();
  sin = sin.to(compute);
  cos = cos.to(compute);
  return {RopeRotation::apply(q, sin, cos), RopeRotation::apply(k, sin, cos)};
}

std::pair<torch::Tensor, torch::Tensor> Rope::apply(const torch::Tensor& q, const torch::Tensor& k,
                                                    int64_t offset) {
  auto [sin_all, cos_all] = tables(offset + q.size(-2), q.device());
  return rotate(q, k, sin_all.slice(0, offset), cos_all.slice(0, offset));
}

std::pair<torch::Tensor, torch::Tensor> Rope::apply(const torch::Tensor& q, const torch::Tensor& k,
                                                    const torch::Tensor& positions) {
  const int64_t B = positions.size(0), T = positions.size(1);
  TORCH_CHECK(q.size(-2) == T, "RoPE positions ", positions.sizes(), " do not match queries ", q.sizes());
  auto [sin_all, cos_all] = tables(T, q.device());
  const auto flat = positions.flatten();
  // [B, 1, T, hd]: one angle table per row, shared by the heads.
  auto per_row = [&](const torch::Tensor& table) {
    return table.index_select(0, flat).view({B, 1, T, head_dim_ / 2});
  };
  return rotate(q, k, per_row(sin_all), per_row(cos_all));
}

}  // namespace siamese::model
