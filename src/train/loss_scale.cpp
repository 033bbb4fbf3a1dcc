#include "siamese/train/loss_scale.h"

namespace siamese::train {

LossScaler::LossScaler(bool enabled, double initial_scale, int64_t growth_interval, torch::Device device)
    : enabled_(enabled),
      growth_interval_(growth_interval),
      scale_(torch::full({}, enabled ? initial_scale : 1.0, torch::dtype(torch::kFloat).device(device))),
      good_steps_(torch::zeros({}, torch::dtype(torch::kInt64).device(device))) {}

torch::Tensor LossScaler::scaled(const torch::Tensor& loss) const {
  return enabled_ ? loss * scale_.to(loss.scalar_type()) : loss;
}

void LossScaler::unscale_(const std::vector<torch::Tensor>& params) const {
  if (!enabled_) return;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return;
  // S is a power of two (validated), so 1/S is exact and every product is too (unless a
  // gradient lands among the subnormals).
  at::_foreach_mul_(grads, scale_.to(torch::kFloat64).reciprocal().to(grads.front().scalar_type()));
}

void LossScaler::update(const torch::Tensor& overflow) {
  if (!enabled_) return;
  const auto hit = overflow.to(torch::kBool);
  const auto next = good_steps_ + 1;
  const auto grow = next.ge(growth_interval_).logical_and(hit.logical_not());
  // In place: a CUDA graph of the micro-batch reads S at the address it captured.
  scale_.copy_(torch::where(hit, scale_ * 0.5, torch::where(grow, scale_ * 2.0, scale_)));
  good_steps_.copy_(torch::where(hit.logical_or(grow), torch::zeros_like(next), next));
}

void LossScaler::restore(double scale, int64_t good_steps) {
  if (!enabled_) return;
  scale_.fill_(scale);
  good_steps_.fill_(good_steps);
}

StateDict LossScaler::state_dict() const {
  return {{"loss_scale", torch::tensor(enabled_ ? scale() : 0.0, torch::kFloat64)},
          {"loss_scale_good_steps", torch::tensor(enabled_ ? good_steps() : int64_t(0), torch::kInt64)}};
}

void LossScaler::load_state_dict(const StateDict& state) {
  const auto saved = state_entry(state, "loss_scale"), good = state_entry(state, "loss_scale_good_steps");
  if (saved.defined() && good.defined() && saved.item<double>() > 0)
    restore(saved.item<double>(), good.item<int64_t>());
}

}  // namespace siamese::train
