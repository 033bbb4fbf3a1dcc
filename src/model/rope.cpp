#include "siamese/model/rope.h"

namespace siamese::model {

Rope::Rope(int64_t head_dim, double theta, bool full_precision)
    : head_dim_(head_dim), theta_(theta), full_precision_(full_precision) {}

std::pair<torch::Tensor, torch::Tensor> Rope::tables(int64_t T, const torch::Device& device) {
  if (!sin_.defined() || sin_.size(0) < T || sin_.device() != device) {
    auto opts = torch::TensorOptions().dtype(torch::kFloat).device(device);
    auto inv_freq = 1.0 / torch::pow(theta_, torch::arange(0, head_dim_, 2, opts) / double(head_dim_));
    auto angles = torch::outer(torch::arange(T, opts), inv_freq);
    auto emb = torch::cat({angles, angles}, -1);
    sin_ = emb.sin();
    cos_ = emb.cos();
  }
  return {sin_.slice(0, 0, T), cos_.slice(0, 0, T)};
}

static torch::Tensor rotate_half(const torch::Tensor& t) {
  auto halves = t.chunk(2, -1);
  return torch::cat({-halves[1], halves[0]}, -1);
}

std::pair<torch::Tensor, torch::Tensor> Rope::rotate(const torch::Tensor& q, const torch::Tensor& k,
                                                     torch::Tensor sin, torch::Tensor cos) const {
  const bool half = q.scalar_type() == torch::kHalf || q.scalar_type() == torch::kBFloat16;
  const auto compute = (half && full_precision_) ? torch::kFloat : q.scalar_type();
  sin = sin.to(compute);
  cos = cos.to(compute);
  auto one = [&](const torch::Tensor& t) {
    auto tc = t.to(compute);
    return (tc * cos + rotate_half(tc) * sin).to(t.scalar_type());
  };
  return {one(q), one(k)};
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
    return table.index_select(0, flat).view({B, 1, T, head_dim_});
  };
  return rotate(q, k, per_row(sin_all), per_row(cos_all));
}

}  // namespace siamese::model
