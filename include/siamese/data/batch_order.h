#pragma once
// The order in which a run visits training instances: one global permutation per epoch,
// drawn from (seed + epoch) as OLMo's IterableDataset does, cut into global batches. Each
// rank takes every world_size-th instance of a global batch (OLMo's indices[rank::world]),
// so ranks read disjoint shares and together consume exactly the global order. The whole
// order is a function of the step, so resuming needs nothing but the step.
#include <cstdint>
#include <vector>

namespace siamese::data {

class BatchOrder {
 public:
  // global_batch must be a multiple of world_size. An epoch is the largest whole number of
  // global batches that fit in num_instances (the incomplete last batch is dropped).
  BatchOrder(int64_t num_instances, int64_t global_batch, uint64_t seed, int rank = 0, int world_size = 1);

  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  // Instance indices this rank reads at 0-based global step `step`.
  std::vector<int64_t> rank_batch(int64_t step);

 private:
  void shuffle_for_epoch(int64_t epoch);

  int64_t num_instances_, global_batch_;
  uint64_t seed_;
  int rank_, world_size_;
  int64_t steps_per_epoch_;
  int64_t epoch_ = -1;
  std::vector<int64_t> permutation_;
};

// The permutation of [0, n) for (seed, epoch): Fisher-Yates over a 64-bit Mersenne
// Twister, with unbiased bounded draws so the order is the same on every platform.
std::vector<int64_t> shuffled_indices(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace siamese::data
