#include "siamese/model/rope.h"

#include "siamese/kernels/rope.h"

namespace siamese::model {

Rope::Rope(int64_t head_dim, double theta, bool full_precision)
    : head_dim_(head_dim), theta_(theta), full_precision_(full_precision) {}

std::pair<torch::Tensor, torch::Tensor> Rope::tables(int64_t T, const torch::Device& device) {
  if (!sin_.defined() || sin_.size(0) < T || sin_.device() != device) {
    // A CUDA graph reads the tables at the addresses it captured (train/micro_batch_graph.h):
    // a longer forward (an evaluation at the full sequence length) must not free them.
    if (sin_.defined()) retired_.insert(retired_.end(), {sin_, cos_});
    auto opts = torch::TensorOptions().dtype(torch::kFloat).device(device);
    auto inv_freq = 1.0 / torch::pow(theta_, torch::arange(0, head_dim_, 2, opts) / double(head_dim_));
    auto angles = torch::outer(torch::arange(T, opts), inv_freq);
    sin_ = angles.sin();
    cos_ = angles.cos();
  }
  return {sin_.slice(0, 0, T), cos_.slice(0, 0, T)};
}

namespace {

// Its backward is the rotation by the negative angles.
class RopeRotation : public torch::autograd::Function<RopeRotation> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& t,
                               const torch::Tensor& s, const torch::Tensor& c) {
    ctx->save_for_backward({s, c});
    return kernels::rope_rotate(t, s, c, 1.0f);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    return {kernels::rope_rotate(grads[0], saved[0], saved[1], -1.0f), torch::Tensor(), torch::Tensor()};
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
