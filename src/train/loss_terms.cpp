#include "siamese/train/loss_terms.h"

namespace siamese::train {

void LossTerms::add(const std::string& name, const torch::Tensor& value) {
  const auto v = value.detach().to(torch::kFloat64).reshape({});
  for (size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) {
      values_[i] = values_[i] + v;
      return;
    }
  names_.push_back(name);
  values_.push_back(v);
}

void LossTerms::sum_over_ranks(dist::Collectives& ranks) {
  if (values_.empty()) return;
  auto all = torch::stack(values_);
  ranks.sum_(all);
  for (size_t i = 0; i < values_.size(); ++i) values_[i] = all[int64_t(i)];
}

torch::Tensor LossTerms::all_finite() const {
  if (values_.empty()) return torch::ones({}, torch::kBool);
  return torch::isfinite(torch::stack(values_)).all();
}

torch::Tensor LossTerms::stacked() const { return values_.empty() ? torch::Tensor() : torch::stack(values_); }

torch::Tensor LossTerms::operator[](const std::string& name) const {
  for (size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) return values_[i];
  return {};
}

}  // namespace siamese::train
