#include "siamese/data/batch_order.h"

#include <numeric>
#include <random>

#include "siamese/common/error.h"

namespace siamese::data {

namespace {

// Uniform integer in [0, bound) by rejection; std::uniform_int_distribution is
// implementation-defined, which would make the data order depend on the standard library.
uint64_t bounded(std::mt19937_64& rng, uint64_t bound) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t x;
  do x = rng();
  while (x >= limit);
  return x % bound;
}

}  // namespace

std::vector<int64_t> shuffled_indices(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> p(n);
  std::iota(p.begin(), p.end(), int64_t{0});
  std::mt19937_64 rng(seed + static_cast<uint64_t>(epoch));
  for (int64_t i = n - 1; i > 0; --i) std::swap(p[i], p[bounded(rng, uint64_t(i) + 1)]);
  return p;
}

BatchOrder::BatchOrder(int64_t num_instances, int64_t global_batch, uint64_t seed, int rank, int world_size)
    : num_instances_(num_instances),
      global_batch_(global_batch),
      seed_(seed),
      rank_(rank),
      world_size_(world_size),
      steps_per_epoch_(num_instances / global_batch) {
  if (global_batch % world_size != 0)
    throw Error("global_train_batch_size " + std::to_string(global_batch) +
                    " is not divisible by the world size " + std::to_string(world_size),
                "global_train_batch_size", "use a multiple of the number of ranks");
  if (steps_per_epoch_ == 0)
    throw Error("the training data holds " + std::to_string(num_instances) +
                    " instances, fewer than one global batch of " + std::to_string(global_batch),
                "global_train_batch_size", "use more data or a smaller global_train_batch_size");
}

void BatchOrder::shuffle_for_epoch(int64_t epoch) {
  if (epoch == epoch_) return;
  permutation_ = shuffled_indices(num_instances_, seed_, epoch);
  epoch_ = epoch;
}

std::vector<int64_t> BatchOrder::rank_batch(int64_t step) {
  shuffle_for_epoch(step / steps_per_epoch_);
  const int64_t start = (step % steps_per_epoch_) * global_batch_;
  std::vector<int64_t> out;
  out.reserve(global_batch_ / world_size_);
  for (int64_t i = start + rank_; i < start + global_batch_; i += world_size_) out.push_back(permutation_[i]);
  return out;
}

}  // namespace siamese::data
