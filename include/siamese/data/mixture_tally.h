#pragma once
// What a mixture's run has been fed: the tokens each source gave the first N steps, counted
// from the global order (every rank's share of each global batch) rather than from what the
// ranks read, so it needs no collective and a resumed run counts from step 0 again. Logged
// as a metrics row of event mixture ("tokens.<source>", "share.<source>"): metrics.jsonl,
// TensorBoard and W&B. Instances the instance filter leaves out are still counted.
#include <cstdint>
#include <vector>

#include "siamese/common/metrics_row.h"
#include "siamese/data/batch_order.h"
#include "siamese/data/token_dataset.h"

namespace siamese::data {

class MixtureTally {
 public:
  // Counts nothing unless `dataset` is a mixture.
  MixtureTally(const TokenDataset& dataset, int64_t global_batch, uint64_t seed);

  bool active() const { return plan_ != nullptr; }
  // The row after `step` steps, counting the steps not counted yet.
  MetricsRow row(int64_t step);
  // Instances of each source in the first `step` steps.
  const std::vector<int64_t>& instances(int64_t step);

 private:
  const TokenDataset& dataset_;
  const MixturePlan* plan_;
  BatchOrder order_;  // the whole global batch: rank 0 of 1
  int64_t counted_ = 0;
  std::vector<int64_t> instances_;
};

}  // namespace siamese::data
