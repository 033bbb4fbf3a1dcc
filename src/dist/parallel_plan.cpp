#include "siamese/dist/parallel_plan.h"

#include "siamese/dist/data_parallel.h"
#include "siamese/dist/sharded.h"

namespace siamese::dist {

int GroupCollectives::rank() const { return comm_.rank(); }
int GroupCollectives::world_size() const { return comm_.size(); }
int GroupCollectives::local_rank() const { return comm_.world().local_rank; }
int GroupCollectives::local_world_size() const { return comm_.world().local_size; }
double GroupCollectives::sum(double value) { return comm_.all_reduce_sum(value); }
double GroupCollectives::max(double value) { return comm_.all_reduce_max(value); }
void GroupCollectives::sum_(torch::Tensor& tensor) { comm_.all_reduce_sum(tensor); }
void GroupCollectives::barrier() { comm_.barrier(); }

ParallelPlan::ParallelPlan()
    : collectives_(std::make_unique<OneProcess>()),
      gradients_(std::make_unique<GradientStrategy>()),
      layout_(std::make_unique<WholeLayout>()) {}

ParallelPlan::ParallelPlan(ParallelPlan&&) noexcept = default;
ParallelPlan& ParallelPlan::operator=(ParallelPlan&&) noexcept = default;
ParallelPlan::~ParallelPlan() = default;

ParallelPlan ParallelPlan::data_parallel(Communicator& comm, const DataParallelOptions& options) {
  ParallelPlan plan;
  plan.collectives_ = std::make_unique<GroupCollectives>(comm);
  plan.gradients_ = std::make_unique<DataParallelGradients>(comm, options);
  plan.layout_ = std::make_unique<WholeLayout>(comm.rank());
  return plan;
}

ParallelPlan ParallelPlan::data_parallel(std::unique_ptr<Communicator> comm,
                                         const DataParallelOptions& options) {
  ParallelPlan plan = data_parallel(*comm, options);
  plan.comm_ = std::move(comm);
  return plan;
}

ParallelPlan ParallelPlan::sharded(std::unique_ptr<Communicator> comm, ShardedOptions options) {
  ParallelPlan plan;
  const bool gathers_blocks = options.shard_parameters;
  auto gradients = std::make_unique<ShardedGradients>(*comm, std::move(options));
  plan.collectives_ = std::make_unique<GroupCollectives>(*comm);
  plan.layout_ = std::make_unique<ShardedLayout>(*gradients);
  if (gathers_blocks) plan.blocks_ = std::make_unique<GatheredBlocks>(*gradients);
  plan.gradients_ = std::move(gradients);
  plan.comm_ = std::move(comm);
  return plan;
}

}  // namespace siamese::dist
