#pragma once
// This rank's training batches, one per step: the instances BatchOrder gives the step, read
// from the run's token files (or synthetic corpus), with the instance filter applied, loaded
// ahead on data.num_workers threads (BatchPrefetcher). Everything the loader threads share
// lives here, so ThreadSanitizer checks it in the data tests without a trainer.
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <mutex>

#include "siamese/config/config.h"
#include "siamese/data/batch_order.h"
#include "siamese/data/prefetcher.h"
#include "siamese/data/token_dataset.h"

namespace siamese::data {

class RankBatches {
 public:
  // The order of data.seed (else seed) over the training instances, cut into global
  // batches of global_train_batch_size, this rank's share of each.
  RankBatches(const config::DataSection& data, int rank, int world_size);

  int64_t num_instances() const { return dataset_.size(); }
  const TokenDataset& dataset() const { return dataset_; }
  int64_t steps_per_epoch() const { return order_.steps_per_epoch(); }

  // Starts loading the batches of 0-based steps first_step .. end_step - 1, in page-locked
  // memory when pin_memory (for an asynchronous copy to a GPU).
  void start(int64_t first_step, int64_t end_step, bool pin_memory);
  // The next step's batch [B, T] (int64, CPU); B falls short of the rank's share by the
  // instances the filter left out.
  torch::Tensor next();

 private:
  TokenDataset dataset_;
  BatchOrder order_;
  config::InstanceFilterConfig filter_;
  int64_t num_workers_;
  std::mutex order_mutex_;  // BatchOrder caches the epoch's permutation
  std::unique_ptr<BatchPrefetcher> prefetcher_;
};

}  // namespace siamese::data
