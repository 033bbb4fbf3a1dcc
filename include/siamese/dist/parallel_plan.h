#pragma once
// How a run is spread over its ranks: four objects, each with one job, that
// train/parallelize.cpp builds from the config and applies to the model and optimizer once.
// Each rank normalises its loss by the token count of the whole global batch, so SUMMING
// gradients over ranks gives exactly the single-process gradient.
//   collectives  who this rank is, sums over ranks (dist/collectives.h)
//   layout       where the optimizer's parameters and state live (dist/shard_layout.h)
//   gradients    how gradients are summed, hooked into autograd (dist/gradient_strategy.h)
//   blocks       what runs around each block, for FULL_SHARD (model/block_runner.h)
// The plan owns them and the process group they share. A default plan is the world of one.
#include <memory>

#include "siamese/dist/collectives.h"
#include "siamese/dist/communicator.h"
#include "siamese/dist/gradient_strategy.h"
#include "siamese/dist/shard_layout.h"
#include "siamese/model/block_runner.h"

namespace siamese::dist {

struct DataParallelOptions;
struct ShardedOptions;

class ParallelPlan {
 public:
  ParallelPlan();
  ParallelPlan(ParallelPlan&&) noexcept;
  ParallelPlan& operator=(ParallelPlan&&) noexcept;
  ~ParallelPlan();

  // ddp over `comm`: every rank whole, gradients all-reduced in buckets (dist/data_parallel.h).
  static ParallelPlan data_parallel(std::unique_ptr<Communicator> comm, const DataParallelOptions& options);
  // The same over a group another plan shares, which must outlive this one (the bench's).
  static ParallelPlan data_parallel(Communicator& comm, const DataParallelOptions& options);
  // The fsdp strategies (dist/sharded.h).
  static ParallelPlan sharded(std::unique_ptr<Communicator> comm, ShardedOptions options);

  Collectives& collectives() const { return *collectives_; }
  ShardLayout& layout() const { return *layout_; }
  GradientStrategy& gradients() const { return *gradients_; }
  // Null where the model runs its blocks as they are (every strategy but FULL_SHARD's).
  model::BlockRunner* blocks() const { return blocks_.get(); }

 private:
  // Destroyed in reverse order: the parts that use the group go before it.
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<Collectives> collectives_;
  std::unique_ptr<GradientStrategy> gradients_;
  std::unique_ptr<ShardLayout> layout_;
  std::unique_ptr<model::BlockRunner> blocks_;
};

}  // namespace siamese::dist
