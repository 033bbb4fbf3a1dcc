#include "siamese/data/mixture_tally.h"

#include <algorithm>

namespace siamese::data {

MixtureTally::MixtureTally(const TokenDataset& dataset, int64_t global_batch, uint64_t seed)
    : dataset_(dataset),
      plan_(dataset.mixture()),
      order_(dataset.size(), global_batch, seed),
      instances_(plan_ ? plan_->sources.size() : 0, 0) {}

const std::vector<int64_t>& MixtureTally::instances(int64_t step) {
  if (step < counted_) {
    std::fill(instances_.begin(), instances_.end(), 0);
    counted_ = 0;
  }
  for (; counted_ < step; ++counted_)
    for (const int64_t i : order_.rank_batch(counted_)) ++instances_[size_t(dataset_.source_of(i))];
  return instances_;
}

MetricsRow MixtureTally::row(int64_t step) {
  const auto& n = instances(step);
  int64_t total = 0;
  for (const int64_t v : n) total += v;
  auto values = nlohmann::ordered_json::object();
  for (size_t s = 0; s < n.size(); ++s) {
    const std::string& name = plan_->sources[s].source_name;
    values["tokens." + name] = n[s] * dataset_.seq_len();
    values["share." + name] = total ? double(n[s]) / double(total) : 0.0;
  }
  return metrics_row(step, metric::kMixtureEvent, values);
}

}  // namespace siamese::data
