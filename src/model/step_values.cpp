#include "siamese/model/step_values.h"

#include <algorithm>

namespace siamese::model {

void StepValues::add(const std::string& name, const torch::Tensor& value, Reduce reduce) {
  const auto v = value.detach().to(torch::kFloat64);
  for (auto& e : entries_)
    if (e.name == name) {
      TORCH_CHECK(e.reduce == reduce && e.value.sizes() == v.sizes(), "step value ", name,
                  " added with another op or shape");
      e.value = e.value + v;
      return;
    }
  entries_.push_back({name, v, reduce});
}

void StepValues::on_reduced(const std::string& key, Finisher finish) {
  for (const auto& [k, f] : finishers_)
    if (k == key) return;
  finishers_.emplace_back(key, std::move(finish));
}

void StepValues::merge(const StepValues& other) {
  for (const auto& e : other.entries_) add(e.name, e.value, e.reduce);
  for (const auto& [k, f] : other.finishers_) on_reduced(k, f);
}

StepValues StepValues::cloned() const {
  StepValues c = *this;
  for (auto& e : c.entries_) e.value = e.value.clone();
  return c;
}

void StepValues::reduce(const std::function<void(torch::Tensor&)>& sum_over_ranks) {
  std::vector<torch::Tensor> summed;
  for (const auto& e : entries_)
    if (e.reduce == Reduce::Sum) summed.push_back(e.value.reshape(-1));
  if (!summed.empty()) {
    auto all = torch::cat(summed);
    sum_over_ranks(all);
    int64_t at = 0;
    for (auto& e : entries_) {
      if (e.reduce != Reduce::Sum) continue;
      const int64_t n = e.value.numel();
      e.value = all.narrow(0, at, n).reshape(e.value.sizes());
      e.reduce = Reduce::None;
      at += n;
    }
  }
  auto finishers = std::move(finishers_);
  finishers_.clear();
  for (const auto& [key, finish] : finishers) finish(*this);
}

void StepValues::remove(const std::string& name) {
  entries_.erase(
      std::remove_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.name == name; }),
      entries_.end());
}

torch::Tensor StepValues::all_finite() const {
  const auto all = flat();
  return all.defined() ? torch::isfinite(all).all() : torch::ones({}, torch::kBool);
}

torch::Tensor StepValues::flat() const {
  if (entries_.empty()) return {};
  std::vector<torch::Tensor> parts;
  for (const auto& e : entries_) parts.push_back(e.value.reshape(-1));
  return torch::cat(parts);
}

torch::Tensor StepValues::operator[](const std::string& name) const {
  for (const auto& e : entries_)
    if (e.name == name) return e.value;
  return {};
}

int64_t StepValues::numel() const {
  int64_t n = 0;
  for (const auto& e : entries_) n += e.value.numel();
  return n;
}

HostValues host_values(const StepValues& values, const double* flat) {
  HostValues out;
  for (const auto& e : values.entries()) {
    const int64_t n = e.value.numel();
    out.push_back({e.name, e.value.sizes().vec(), std::vector<double>(flat, flat + n)});
    flat += n;
  }
  return out;
}

}  // namespace siamese::model
