#include "siamese/data/rank_batches.h"

#include <vector>

#include "siamese/data/instance_filter.h"

namespace siamese::data {

RankBatches::RankBatches(const config::DataSection& data, int rank, int world_size)
    : dataset_(train_dataset(data)),
      order_(dataset_.size(), data.global_batch, data.seed, rank, world_size),
      filter_(data.data.instance_filter),
      num_workers_(data.data.num_workers) {}

void RankBatches::start(int64_t first_step, int64_t end_step, bool pin_memory) {
  prefetcher_.reset();  // its workers read order_ and dataset_: stop them before new ones start
  prefetcher_ = std::make_unique<BatchPrefetcher>(
      [this, pin_memory](int64_t step) {
        std::vector<int64_t> indices;
        {
          std::lock_guard<std::mutex> lock(order_mutex_);
          indices = order_.rank_batch(step);
        }
        int64_t dropped = 0;
        torch::Tensor batch = keep_instances(dataset_.batch(indices), filter_, dropped);
        return pin_memory ? batch.pin_memory() : batch;
      },
      first_step, end_step, num_workers_);
}

torch::Tensor RankBatches::next() {
  TORCH_CHECK(prefetcher_, "RankBatches::next() before start()");
  return prefetcher_->next();
}

}  // namespace siamese::data
