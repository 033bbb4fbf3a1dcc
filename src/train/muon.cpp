#include "siamese/train/muon.h"

#include <algorithm>
#include <cmath>

namespace siamese::train {

torch::Tensor newton_schulz(const torch::Tensor& update, int64_t steps) {
  TORCH_CHECK(update.dim() == 2, "Newton-Schulz orthogonalises 2-D matrices, got ", update.sizes());
  const auto [a, b, c] = kNewtonSchulzCoefficients;
  // The iteration multiplies by X X^T, the smaller Gram matrix on the wide orientation.
  const bool tall = update.size(0) > update.size(1);
  auto x = update.to(torch::kBFloat16, /*non_blocking=*/false, /*copy=*/true);
  if (tall) x = x.t();
  // Scaled to Frobenius norm 1, so every singular value is at most 1.
  x.div_(at::linalg_vector_norm(x, 2).clamp_min(kNewtonSchulzEps));
  for (int64_t i = 0; i < steps; ++i) {
    const auto gram = x.mm(x.t());
    const auto polynomial = torch::addmm(gram, gram, gram, /*beta=*/b, /*alpha=*/c);
    x = torch::addmm(x, polynomial, x, /*beta=*/a);
  }
  return tall ? x.t() : x;
}

double adjusted_lr(double lr, config::MuonLrAdjust adjust_lr, torch::IntArrayRef shape) {
  const double rows = double(shape[shape.size() - 2]), cols = double(shape.back());
  if (adjust_lr == config::MuonLrAdjust::MatchRmsAdamW) return lr * 0.2 * std::sqrt(std::max(rows, cols));
  return lr * std::sqrt(std::max(1.0, rows / cols));
}

Muon::Muon(std::vector<torch::Tensor> params, MuonOptions options, std::vector<std::vector<int64_t>> shapes,
           dist::ShardLayout* shards)
    : params_(std::move(params)), shapes_(std::move(shapes)), shards_(shards), options_(std::move(options)) {
  if (shapes_.empty())
    for (const auto& p : params_) shapes_.push_back(p.sizes().vec());
  TORCH_CHECK(shapes_.size() == params_.size(), "Muon: ", shapes_.size(), " shapes for ", params_.size(),
              " parameters");
  for (const auto& shape : shapes_)
    TORCH_CHECK(shape.size() == 2 || shape.size() == 3, "Muon updates 2-D matrices and stacks of them, got ",
                shape);
}

bool Muon::owns(const torch::Tensor& param) const {
  return std::any_of(params_.begin(), params_.end(), [&](const torch::Tensor& p) {
    return p.unsafeGetTensorImpl() == param.unsafeGetTensorImpl();
  });
}

torch::Tensor& Muon::momentum_buffer(const torch::Tensor& param) {
  TORCH_CHECK(owns(param), "not one of Muon's parameters");
  return buffers_[param.unsafeGetTensorImpl()];
}

void Muon::update(const std::optional<torch::Tensor>& skip) {
  torch::NoGradGuard no_grad;
  const MuonOptions& o = options_;
  std::optional<torch::Tensor> keep;
  if (skip) keep = *skip == 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor& p = params_[i];
    const auto& shape = shapes_[i];
    if (!p.grad().defined()) continue;
    const torch::Tensor& g = p.grad();
    torch::Tensor& buffer = buffers_[p.unsafeGetTensorImpl()];
    if (!buffer.defined()) buffer = torch::zeros_like(g, torch::MemoryFormat::Preserve);
    const auto next_buffer = buffer.lerp(g, 1 - o.momentum);
    const auto chunk = o.nesterov ? g.lerp(next_buffer, o.momentum) : next_buffer;
    const auto direction = shards_ ? shards_->whole_of(chunk, shape) : chunk;
    torch::Tensor step;
    if (direction.dim() == 2) {
      step = newton_schulz(direction, o.ns_steps);
    } else {
      std::vector<torch::Tensor> steps;
      for (int64_t e = 0; e < direction.size(0); ++e)
        steps.push_back(newton_schulz(direction[e], o.ns_steps));
      step = torch::stack(steps);
    }
    if (shards_) step = shards_->shard_of(step);
    // Weight decay uses the unadjusted learning rate, as torch does.
    const double decay = 1 - o.lr * o.weight_decay, rate = -adjusted_lr(o.lr, o.adjust_lr, shape);
    if (keep) {
      p.copy_(torch::where(*keep, p.mul(decay).add_(step, rate), p));
      buffer = torch::where(*keep, next_buffer, buffer);
    } else {
      p.mul_(decay).add_(step, rate);
      buffer = next_buffer;
    }
  }
}

}  // namespace siamese::train
